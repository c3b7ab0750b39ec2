package loop

import (
	"bytes"
	"encoding/json"

	"github.com/kaptinlin/jsonrepair"
)

// repairJSON repairs almost-JSON produced by a model (single quotes, trailing
// commas, missing quotes on keys, ...). It accepts the result only when it is
// a JSON object.
func repairJSON(s string) (json.RawMessage, bool) {
	out, err := jsonrepair.Repair(s)
	if err != nil || !json.Valid([]byte(out)) {
		return nil, false
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		return nil, false
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(out)); err != nil {
		return nil, false
	}
	return json.RawMessage(buf.Bytes()), true
}
