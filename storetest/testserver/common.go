package testserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
)

// maxPortAttempts bounds the retries when the chosen port was taken by
// someone else between our check and the server's bind.
const maxPortAttempts = 5

// errPortInUse marks a start that failed because a port was already taken;
// such a start is retried with new ports.
var errPortInUse = errors.New("port already in use")

// onFreePorts calls start with n free ports until it succeeds or fails for
// another reason than errPortInUse, at most maxPortAttempts times.
func onFreePorts[T any](n int, start func(ports []int) (T, error)) (T, error) {
	var zero T
	var lastErr error
	for range maxPortAttempts {
		ports, err := freePorts(n)
		if err != nil {
			return zero, err
		}
		v, err := start(ports)
		if !errors.Is(err, errPortInUse) {
			return v, err
		}
		lastErr = err
	}
	return zero, fmt.Errorf("testserver: gave up after %d attempts to find free ports: %w",
		maxPortAttempts, lastErr)
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. The ports are
// free when we look; someone else may take them before the server binds,
// which onFreePorts handles by retrying.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testserver: find a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// started is the end of the Start functions: tb.Fatalf on err, else
// tb.Cleanup to close v, reporting an error of Close.
func started[T io.Closer](tb testing.TB, v T, err error) T {
	tb.Helper()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if err := v.Close(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return v
}
