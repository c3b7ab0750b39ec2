package scripted

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunServesTheModelAndRemovesTheFolder(t *testing.T) {
	model := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "model at "+r.URL.Path) })
	var dir string
	err := Run(t.Context(), "scripted-test-", false, model, func(ctx context.Context, env Env) error {
		dir = env.Dir
		if !strings.HasPrefix(env.DataDir, env.Dir+string(os.PathSeparator)) || !strings.HasPrefix(env.Workspace, env.Dir+string(os.PathSeparator)) {
			t.Errorf("data %s and workspace %s are not in %s", env.DataDir, env.Workspace, env.Dir)
		}
		resp, err := http.Get(env.ModelURL + "/models")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if string(body) != "model at /v1/models" {
			t.Errorf("model answered %q", body)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("folder %s left behind: %v", dir, err)
	}
}

func TestRunKeepsTheFolderAndReturnsFnsError(t *testing.T) {
	boom := errors.New("boom")
	var dir string
	err := Run(t.Context(), "scripted-test-", true, nil, func(ctx context.Context, env Env) error {
		dir = env.Dir
		if env.ModelURL != "" {
			t.Errorf("no model, yet ModelURL %q", env.ModelURL)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want fn's", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("kept folder %s: %v", dir, err)
	}
}
