package loop

import (
	"encoding/json"
	"testing"
)

// Behaviour 4: argument fixing.
func TestFixArgs(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"limit":{"type":"integer"},"ratio":{"type":"number"},"all":{"type":"boolean"},"name":{"type":"string"},"max_results":{"type":"integer"}}}`)
	for _, tc := range []struct{ in, want string }{
		{`{"path":"a"}`, `{"path":"a"}`},
		{`{"filePath":"a"}`, `{"path":"a"}`},
		{`{"Path":"a","LIMIT":"3"}`, `{"limit":3,"path":"a"}`},
		{`{"max-results":"10"}`, `{"max_results":10}`},
		{`{"path":"a","ratio":"0.5","all":"true"}`, `{"all":true,"path":"a","ratio":0.5}`},
		{`{"path":null,"name":12}`, `{"name":"12"}`},
		{`{"file":"a"}`, `{"path":"a"}`}, // declared alias
		{`{"path":"a","file_path":"b"}`, `{"file_path":"b","path":"a"}`},
		{`{"unknown":1}`, `{"unknown":1}`},
		{`{"limit":"many"}`, `{"limit":"many"}`},
	} {
		got, _ := fixArgs(schema, map[string]string{"file": "path"}, json.RawMessage(tc.in))
		var g, w any
		_ = json.Unmarshal(got, &g)
		_ = json.Unmarshal([]byte(tc.want), &w)
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		if string(gb) != string(wb) {
			t.Errorf("fixArgs(%s) = %s, want %s", tc.in, gb, wb)
		}
	}
}
