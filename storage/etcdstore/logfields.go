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

func (c shortFieldsCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c shortFieldsCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	return c.Core.Write(e, shortened(fields))
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
