package storetest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// RunUnreachable checks a store whose server cannot be reached (made by
// newStore, on an address nothing listens on): every call returns within
// its context an error of the store's own, naming the store's package, and
// never ErrNotAcquired, ErrNotOwned or a false success.
func RunUnreachable(t *testing.T, newStore func(t *testing.T) driver.Store) {
	t.Helper()
	s := newStore(t)
	pkg := reflect.TypeOf(s)
	for pkg.Kind() == reflect.Pointer {
		pkg = pkg.Elem()
	}
	name := pkg.PkgPath()[strings.LastIndexByte(pkg.PkgPath(), '/')+1:]
	key, tok := Key(t), token()
	calls := map[string]func(ctx context.Context) error{
		"Acquire": func(ctx context.Context) error {
			f, err := s.Acquire(ctx, key, tok, longTTL)
			return falseSuccess(f, err)
		},
		"Release": func(ctx context.Context) error { return s.Release(ctx, key, tok) },
		"Renew":   func(ctx context.Context) error { return s.Renew(ctx, key, tok, longTTL) },
		"Inspect": func(ctx context.Context) error {
			_, err := s.Inspect(ctx, key)
			return err
		},
	}
	if q, ok := s.(driver.Queuer); ok {
		calls["AcquireQueued"] = func(ctx context.Context) error {
			f, err := q.AcquireQueued(ctx, key, tok, longTTL, time.Second)
			return falseSuccess(f, err)
		}
	}
	if h, ok := s.(driver.HandOffer); ok {
		calls["HandOff"] = func(ctx context.Context) error {
			_, _, err := h.HandOff(ctx, key, tok, token(), longTTL)
			return err
		}
	}
	if b, ok := s.(driver.BatchRenewer); ok {
		calls["RenewBatch"] = func(ctx context.Context) error {
			return b.RenewBatch(ctx, []driver.RenewItem{{Key: key, Token: tok, TTL: longTTL}})[0]
		}
	}
	var wg sync.WaitGroup
	for op, call := range calls {
		wg.Go(func() { // at once: a client that rides out an outage waits out every context
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			start := time.Now()
			err := call(ctx)
			took := time.Since(start)
			cancel()
			switch {
			case err == nil:
				t.Errorf("%s on an unreachable server succeeded", op)
			case errors.Is(err, driver.ErrNotAcquired), errors.Is(err, driver.ErrNotOwned):
				t.Errorf("%s on an unreachable server: %v, an answer the server never gave", op, err)
			case !strings.Contains(err.Error(), name+":"):
				t.Errorf("%s error %q does not say which store failed (%s)", op, err, name)
			}
			if took > 3*time.Second+5*time.Second { // the context, then a loaded machine's slack
				t.Errorf("%s took %v with a 3 s context", op, took)
			}
		})
	}
	wg.Wait()
}

// falseSuccess turns a fence given by a store that cannot have issued one
// into an error.
func falseSuccess(fence int64, err error) error {
	if err == nil {
		return errors.New("a fence from nowhere")
	}
	return err
}
