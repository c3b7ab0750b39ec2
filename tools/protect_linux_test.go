package tools

import "testing"

func TestProtectProcess(t *testing.T) {
	if d, err := Dumpable(); err != nil || !d {
		t.Fatalf("a test process should start dumpable: %v, %v", d, err)
	}
	if err := ProtectProcess(); err != nil {
		t.Fatal(err)
	}
	if d, err := Dumpable(); err != nil || d {
		t.Errorf("after ProtectProcess: dumpable = %v, %v", d, err)
	}
}
