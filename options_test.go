package leasehold_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// An option that does not apply to a call does not compile for it: the wait
// budget and release timeout are Hold's alone, while renewal options serve
// Hold, KeepAlive and Lead alike.
func TestOptionsFitTheirCalls(t *testing.T) {
	renew := reflect.TypeFor[leasehold.RenewOption]()
	hold := reflect.TypeFor[leasehold.HoldOption]()
	for name, o := range map[string]leasehold.HoldOption{
		"WithWaitBudget": leasehold.WithWaitBudget(time.Second), "WithReleaseTimeout": leasehold.WithReleaseTimeout(time.Second),
	} {
		if reflect.TypeOf(o).AssignableTo(renew) {
			t.Errorf("%s can be given to KeepAlive", name)
		}
	}
	for name, o := range map[string]leasehold.RenewOption{
		"FenceAfter": leasehold.FenceAfter(3), "ContinueOnRenewFailure": leasehold.ContinueOnRenewFailure(),
		"WithRenewInterval": leasehold.WithRenewInterval(time.Second), "WithRenewTimeout": leasehold.WithRenewTimeout(time.Second),
		"WithDriftMargin": leasehold.WithDriftMargin(time.Second),
	} {
		if !reflect.TypeOf(o).Implements(hold) {
			t.Errorf("%s cannot be given to Hold", name)
		}
	}
}
