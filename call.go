package rivet

import (
	"context"
	"encoding/json"
	"fmt"
)

// Call runs an action through any Handle and decodes its result into R:
//
//	n, err := rivet.Call[int](ctx, client.GetOrCreate("counter", "main"), "increment", 5)
func Call[R any](ctx context.Context, h Handle, action string, args ...any) (R, error) {
	var out R
	raw, err := h.Call(ctx, action, args...)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("rivet: result of %s does not decode into %T: %w", action, out, err)
	}
	return out, nil
}

// MarshalArgs encodes call arguments as the JSON array the wire carries.
// A json.RawMessage argument is embedded as JSON (compacted), not quoted.
func MarshalArgs(args ...any) (json.RawMessage, error) {
	if len(args) == 0 {
		return json.RawMessage("[]"), nil
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, Errorf(ErrInvalidArgument, "arguments do not marshal to JSON: %v", err)
	}
	return b, nil
}
