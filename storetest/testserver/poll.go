package testserver

import (
	"errors"
	"time"
)

// pollUntil calls check every clusterPollInterval until it returns nil, for
// at most timeout (bounded in count and time), and returns nil or check's
// last error.
func pollUntil(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	err := errors.New("no check was made")
	for poll := 0; poll < int(timeout/clusterPollInterval)+1 && time.Now().Before(deadline); poll++ {
		if err = check(); err == nil {
			return nil
		}
		time.Sleep(clusterPollInterval)
	}
	return err
}
