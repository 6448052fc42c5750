package driver

import (
	"context"
	"fmt"
	"time"
)

// Limits of a forced release's record.
const (
	// MaxReasonLen bounds a forced release's reason in bytes: a sentence
	// and a ticket link, not a log dump.
	MaxReasonLen = 512

	// MaxAuditLimit bounds one Audit call: one short read for the store.
	MaxAuditLimit = 10_000

	// AuditTokenLen is how much of the removed token a record keeps: enough
	// to match it with log lines, not enough to use it.
	AuditTokenLen = 10
)

// AuditRecord is one forced release, as the store keeps it.
type AuditRecord struct {
	Time   time.Time // when the store removed the lease, on its own clock where it has one
	Key    string
	Holder string // the removed owner's identity ("" when its token carried none)
	Token  string // the first AuditTokenLen characters of the removed owner's token
	Fence  int64  // the removed lease's fence
	Reason string // why, as the operator gave it
	By     string // who forced the release
}

// ForceReleaser is an optional Store ability: an operator's release of a
// stuck key, whoever holds it, recorded in the store itself. It is safe
// because of the fence: the next owner gets a higher fence, so storage that
// checks fences refuses the removed owner's writes once the next owner has
// written, and the removed owner's next Renew or Release gets ErrNotOwned,
// as after an expiry.
type ForceReleaser interface {
	// ForceRelease deletes key whatever token holds it and, in the same
	// atomic step, appends its AuditRecord (reason, by, and the removed
	// lease's holder, token prefix and fence), then wakes the key's waiters
	// as Release does. It returns the record.
	//
	// It returns ErrNotOwned, writing nothing, when key is not held, and an
	// *ArgumentError, writing nothing, for a bad key, reason or by (see
	// ValidateForceRelease).
	ForceRelease(ctx context.Context, key, reason, by string) (AuditRecord, error)

	// Audit returns up to limit records, newest first: key's, or every
	// key's when key is "". It returns an *ArgumentError for a bad key or a
	// limit outside 1..MaxAuditLimit. Each store documents how long it keeps
	// records. A record the store cannot read (written by another tool, or
	// damaged) is listed as UnreadableAuditRecord makes it, not an error:
	// one bad record neither hides the others nor goes unseen.
	Audit(ctx context.Context, key string, limit int) ([]AuditRecord, error)
}

// ValidateForceRelease checks the arguments of ForceRelease: a valid key, a
// reason of 1 to MaxReasonLen bytes of UTF-8 without control characters
// (it ends up in log lines and tables), and by, checked as an identity.
func ValidateForceRelease(key, reason, by string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := checkLine("reason", reason, MaxReasonLen); err != nil {
		return err
	}
	if err := ValidateIdentity(by); err != nil {
		return &ArgumentError{Arg: "by", Reason: err.(*ArgumentError).Reason}
	}
	return nil
}

// ValidateAudit checks the arguments of Audit: "" or a valid key, and a
// limit in 1..MaxAuditLimit.
func ValidateAudit(key string, limit int) error {
	if key != "" {
		if err := ValidateKey(key); err != nil {
			return err
		}
	}
	if limit < 1 || limit > MaxAuditLimit {
		return &ArgumentError{Arg: "limit", Reason: fmt.Sprintf("%d is outside 1..%d", limit, MaxAuditLimit)}
	}
	return nil
}

// UnreadableAuditRecord is what Audit lists for a stored record it cannot
// read: its key and time as far as known, and a Reason that says so and
// why, in brackets, which no operator's reason can look like unnoticed.
func UnreadableAuditRecord(at time.Time, key, where string, err error) AuditRecord {
	return AuditRecord{Time: at, Key: key, Reason: fmt.Sprintf("[unreadable audit record %s: %v]", where, err)}
}

// NewAuditRecord is the record of removing the lease token held with fence,
// for stores that build it in Go.
func NewAuditRecord(at time.Time, key, token string, fence int64, reason, by string) AuditRecord {
	prefix := token
	if len(prefix) > AuditTokenLen {
		prefix = prefix[:AuditTokenLen]
	}
	return AuditRecord{Time: at, Key: key, Holder: TokenHolder(token), Token: prefix, Fence: fence, Reason: reason, By: by}
}
