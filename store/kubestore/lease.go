package kubestore

import (
	"encoding/json"
	"strconv"
	"time"
)

// lease is a coordination.k8s.io/v1 Lease as the server sent it, every
// field kept (numbers as json.Number), whether this package knows it or
// not: an Update replaces the whole object, so a field the Store dropped
// would be deleted from the cluster. The Store reads and changes only
// metadata.name, namespace, resourceVersion, labels and annotations, and
// spec.holderIdentity, leaseDurationSeconds, acquireTime, renewTime and
// leaseTransitions. A lease is never changed once shared: writers change a
// clone.
type lease struct {
	obj map[string]any
}

// microTimeLayout is the wire form of a Lease's acquireTime and renewTime
// (metav1.MicroTime): RFC 3339 in UTC with microseconds.
const microTimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// section returns obj's field name as an object, or nil.
func section(obj map[string]any, name string) map[string]any {
	m, _ := obj[name].(map[string]any)
	return m
}

// ensure returns obj's field name as an object, creating it if missing.
func ensure(obj map[string]any, name string) map[string]any {
	m := section(obj, name)
	if m == nil {
		m = map[string]any{}
		obj[name] = m
	}
	return m
}

func str(m map[string]any, name string) string {
	s, _ := m[name].(string)
	return s
}

// integer reads an integer field, reporting whether it is one.
func integer(m map[string]any, name string) (int64, bool) {
	n, ok := m[name].(json.Number)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	return v, err == nil
}

func (l *lease) meta() map[string]any { return section(l.obj, "metadata") }
func (l *lease) spec() map[string]any { return section(l.obj, "spec") }

func (l *lease) name() string            { return str(l.meta(), "name") }
func (l *lease) namespace() string       { return str(l.meta(), "namespace") }
func (l *lease) resourceVersion() string { return str(l.meta(), "resourceVersion") }

// annotation returns one of the Lease's annotations.
func (l *lease) annotation(name string) (string, bool) {
	v, ok := section(l.meta(), "annotations")[name].(string)
	return v, ok
}

// holder is spec.holderIdentity, "" when unset.
func (l *lease) holder() string { return str(l.spec(), "holderIdentity") }

// durationSeconds is spec.leaseDurationSeconds, 0 when unset; ok is false
// when it is set to something that is not an integer.
func (l *lease) durationSeconds() (d int64, ok bool) {
	sp := l.spec()
	if v, set := sp["leaseDurationSeconds"]; !set || v == nil {
		return 0, true
	}
	return integer(sp, "leaseDurationSeconds")
}

// renewTime is spec.renewTime, the zero time when unset or unreadable.
func (l *lease) renewTime() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, str(l.spec(), "renewTime"))
	return t
}

// transitions is spec.leaseTransitions, 0 when unset.
func (l *lease) transitions() int64 {
	t, _ := integer(l.spec(), "leaseTransitions")
	return t
}

// clone returns a deep copy, for a writer to change.
func (l *lease) clone() *lease { return &lease{obj: deepCopy(l.obj).(map[string]any)} }

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			s[i] = deepCopy(e)
		}
		return s
	default: // string, json.Number, bool, nil: immutable
		return v
	}
}

// setAnnotation sets one annotation.
func (l *lease) setAnnotation(name, value string) {
	ensure(ensure(l.obj, "metadata"), "annotations")[name] = value
}

// setHolder makes the Lease held by token for secs seconds, acquired now.
func (l *lease) setHolder(token string, secs int32) {
	now := time.Now().UTC().Format(microTimeLayout)
	sp := ensure(l.obj, "spec")
	sp["holderIdentity"] = token
	sp["leaseDurationSeconds"] = json.Number(strconv.Itoa(int(secs)))
	sp["acquireTime"] = now
	sp["renewTime"] = now
}

// clearHolder makes the Lease free, keeping its annotations (the fence).
func (l *lease) clearHolder() {
	sp := ensure(l.obj, "spec")
	for _, f := range []string{"holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime"} {
		delete(sp, f)
	}
}

// setDuration sets spec.leaseDurationSeconds.
func (l *lease) setDuration(secs int32) {
	ensure(l.obj, "spec")["leaseDurationSeconds"] = json.Number(strconv.Itoa(int(secs)))
}

// setRenewTime sets spec.renewTime.
func (l *lease) setRenewTime(t time.Time) {
	ensure(l.obj, "spec")["renewTime"] = t.UTC().Format(microTimeLayout)
}

// setTransitions sets spec.leaseTransitions.
func (l *lease) setTransitions(n int64) {
	ensure(l.obj, "spec")["leaseTransitions"] = json.Number(strconv.FormatInt(n, 10))
}
