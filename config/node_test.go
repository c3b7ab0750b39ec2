package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

type nodeSection struct {
	Model string `yaml:"model"`
	Steps int    `yaml:"steps"`
}

type nodeConfig struct {
	Base   nodeSection     `yaml:"base"`
	Others map[string]Node `yaml:"others"`
}

// TestNodeDecodesOverInheritedValues: a Node keeps its subtree (expanded)
// and decodes later over values computed from another section, keeping
// what it does not set and naming the full path of its problems.
func TestNodeDecodesOverInheritedValues(t *testing.T) {
	data := []byte("others:\n  work:\n    model: ${M}\n  bad:\n    stpes: 3\n    model: [x]\nbase:\n  model: base-model\n  steps: 7\n")
	env := func(k string) (string, bool) { return map[string]string{"M": "work-model"}[k], k == "M" }
	var c nodeConfig
	if err := Decode(data, &c, Options{LookupEnv: env}); err != nil {
		t.Fatal(err)
	}
	work := c.Base
	if err := c.Others["work"].Decode(&work); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(nodeSection{Model: "work-model", Steps: 7}, work); diff != "" {
		t.Errorf("work (-want +got):\n%s", diff)
	}
	if c.Base.Model != "base-model" {
		t.Errorf("base changed to %q", c.Base.Model)
	}
	bad := c.Base
	var got []string
	for _, p := range Problems(c.Others["bad"].Decode(&bad)) {
		got = append(got, p.Error())
	}
	want := []string{
		"others.bad.stpes (line 5): unknown key (did you mean steps?)",
		`others.bad.model (line 6): must be a string, got a list`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	var zero Node
	if !zero.IsZero() || zero.Decode(&bad) != nil {
		t.Error("the zero Node must decode to nothing")
	}
}
