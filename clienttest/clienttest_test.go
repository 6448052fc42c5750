package clienttest_test

import (
	"sync"
	"testing"

	"github.com/leasehold/leasehold/clienttest"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// memstore is one backend in process: every Client of a case shares it.
func TestClientOnMemstore(t *testing.T) {
	var mu sync.Mutex
	stores := map[string]*memstore.Store{}
	clienttest.Run(t, func(t *testing.T) driver.Store {
		mu.Lock()
		defer mu.Unlock()
		s := stores[t.Name()]
		if s == nil {
			s = memstore.New()
			stores[t.Name()] = s
		}
		return s
	})
}
