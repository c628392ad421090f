package etcdstore

import (
	"fmt"
	"unicode/utf8"

	"go.uber.org/zap/zapcore"
)

// maxLogFieldBytes is how much of one string field of etcd's log lines
// is kept. etcd logs a slow request whole: "apply request took too long"
// for a node's claim of its partitions carries a transaction of 1,024
// compares and puts, one line of about 200 KB that buries the rest of the
// log (a user trial found it at a node's restart on a busy machine). What
// tells an operator which request it was is at its start.
const maxLogFieldBytes = 1024

// ShortFields wraps core so that string fields longer than
// maxLogFieldBytes are cut to that, with their full length said; for
// etcd's loggers, the member's and the client's.
func ShortFields(core zapcore.Core) zapcore.Core { return shortFieldsCore{core} }

type shortFieldsCore struct{ zapcore.Core }

// Check lets the wrapped core decide, as it would alone (its sampler, a
// tee's levels per output), and cuts the fields of what it takes.
func (c shortFieldsCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return filtered(c.Core, e, ce, func(fields []zapcore.Field) ([]zapcore.Field, bool) { return shortened(fields), true })
}

func (c shortFieldsCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	return c.Core.Write(e, shortened(fields))
}

// filtered adds to ce what inner's own Check takes of e, its fields
// passed through filter as it is written (false drops the entry). A core
// that changes fields cannot write through inner.Write alone: that skips
// the decisions inner's Check makes (a sampler's, a tee's per core).
func filtered(inner zapcore.Core, e zapcore.Entry, ce *zapcore.CheckedEntry, filter func([]zapcore.Field) ([]zapcore.Field, bool)) *zapcore.CheckedEntry {
	taken := inner.Check(e, nil)
	if taken == nil {
		return ce
	}
	return ce.AddCore(e, checkedWriter{Core: inner, taken: taken, filter: filter})
}

// checkedWriter writes one entry that a core's Check took (taken), its
// fields filtered.
type checkedWriter struct {
	zapcore.Core // for Enabled, With and Sync; Write goes to taken
	taken        *zapcore.CheckedEntry
	filter       func([]zapcore.Field) ([]zapcore.Field, bool)
}

func (w checkedWriter) Write(_ zapcore.Entry, fields []zapcore.Field) error {
	if fields, keep := w.filter(fields); keep {
		w.taken.Write(fields...)
	}
	return nil
}

func (c shortFieldsCore) With(fields []zapcore.Field) zapcore.Core {
	return shortFieldsCore{c.Core.With(shortened(fields))}
}

// shortened returns fields with each long string cut, copying the slice
// only when one is: most lines have none.
func shortened(fields []zapcore.Field) []zapcore.Field {
	out := fields
	for i, f := range fields {
		s, ok := fieldString(f)
		if !ok || len(s) <= maxLogFieldBytes {
			continue
		}
		if len(out) > 0 && &out[0] == &fields[0] { // not copied yet
			out = append([]zapcore.Field(nil), fields...)
		}
		cut := maxLogFieldBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		out[i] = zapcore.Field{Key: f.Key, Type: zapcore.StringType,
			String: fmt.Sprintf("%s… (%d bytes in all)", s[:cut], len(s))}
	}
	return out
}

// fieldString is f's text if f is a string, a byte string or a Stringer.
func fieldString(f zapcore.Field) (string, bool) {
	switch f.Type {
	case zapcore.StringType:
		return f.String, true
	case zapcore.ByteStringType:
		b, ok := f.Interface.([]byte)
		return string(b), ok
	case zapcore.StringerType:
		s, ok := f.Interface.(fmt.Stringer)
		if !ok {
			return "", false
		}
		return stringOf(s)
	}
	return "", false
}

// stringOf calls s.String as zap would, a nil or panicking Stringer
// being left for zap to report.
func stringOf(s fmt.Stringer) (str string, ok bool) {
	defer func() {
		if recover() != nil {
			str, ok = "", false
		}
	}()
	return s.String(), true
}
