package search_test

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/memory/notes"
	"github.com/switchboard-chat/switchboard/memory/search"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	dir  string
	root *os.Root
	idx  *search.Index
	path string
}

func newFixture(t *testing.T, files map[string]string, mod func(*search.Options)) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), path: filepath.Join(t.TempDir(), "memory-index.db")}
	for rel, content := range files {
		f.write(t, rel, content)
	}
	root, err := os.OpenRoot(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	f.root = root
	opts := search.Options{Root: root, Path: f.path, Now: fixedNow}
	if mod != nil {
		mod(&opts)
	}
	idx, err := search.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idx.Close() })
	f.idx = idx
	if _, err := idx.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(f.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

var now = time.Date(2025, 3, 10, 12, 0, 0, 0, time.UTC)

func fixedNow() time.Time { return now }

var everything = []notes.Root{{Path: notes.CoreName}, {Path: notes.Dir, Dir: true, Recursive: true}}

func paths(rs []search.Result) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Path)
	}
	return out
}

const u = "memory/users/telegram/1/"

var corpus = map[string]string{
	u + "MEMORY.md":     "# Memory\n\n- Alice prefers green tea, no sugar.\n- Alice's dog is called Biscuit.\n",
	u + "2025-03-09.md": "# 2025-03-09\n\n- Alice booked flights to Tokyo for the conference in May.\n",
	u + "2025-03-08.md": "# 2025-03-08\n\n- Discussed the quarterly budget; agreed to cut cloud costs by 20%.\n",
	u + "2025-03-07.md": "# 2025-03-07\n\n- 我们决定下周三去北京出差，住在王府井附近的酒店。\n",
	u + "2025-03-06.md": "# 2025-03-06\n\n- 用户喜欢喝绿茶，不喜欢咖啡。\n",
	u + "project.md":    "# 项目\n\n项目进度：数据库迁移已经完成，接下来是性能测试。\n",
	u + "2025-03-05.md": "# 2025-03-05\n\n- Planning the database migration: backups first, then schema changes.\n",
	"MEMORY.md":         "# Memory\n\nThe office is closed on public holidays.\n",
}

func TestRankingEnglishAndChinese(t *testing.T) {
	f := newFixture(t, corpus, nil)
	for _, tt := range []struct {
		query string
		top   string
		only  bool // the top result is the only one
	}{
		{"flight Tokyo", u + "2025-03-09.md", true},
		{"what does Alice like to drink? tea", u + "MEMORY.md", false},
		{"budget cloud costs", u + "2025-03-08.md", true},
		{"北京出差", u + "2025-03-07.md", true},
		{"绿茶", u + "2025-03-06.md", true},
		{"茶", u + "2025-03-06.md", true},
		{"数据库迁移", u + "project.md", true},
		{"planned migrations", u + "2025-03-05.md", true},
		{"Biscuit", u + "MEMORY.md", true},
		{"holidays", "MEMORY.md", true},
	} {
		rs, err := f.idx.Search(t.Context(), search.Query{Text: tt.query, Roots: everything})
		if err != nil {
			t.Fatalf("Search(%q) = %v", tt.query, err)
		}
		if len(rs) == 0 || rs[0].Path != tt.top {
			t.Errorf("Search(%q) = %v, want %s first", tt.query, paths(rs), tt.top)
			continue
		}
		if tt.only && len(rs) != 1 {
			t.Errorf("Search(%q) = %v, want only %s", tt.query, paths(rs), tt.top)
		}
		if rs[0].Score <= 0 || rs[0].Keyword <= 0 || rs[0].StartLine < 1 || rs[0].EndLine < rs[0].StartLine || rs[0].Text == "" {
			t.Errorf("Search(%q) top result %+v is incomplete", tt.query, rs[0])
		}
	}
	for _, q := range []string{"zebra", "the of and", "鲸鱼"} {
		if rs, err := f.idx.Search(t.Context(), search.Query{Text: q, Roots: everything}); err != nil || len(rs) != 0 {
			t.Errorf("Search(%q) = %v, %v; want nothing", q, paths(rs), err)
		}
	}
	rs, _ := f.idx.Search(t.Context(), search.Query{Text: "Alice", Roots: everything, Max: 1})
	if len(rs) != 1 {
		t.Errorf("Max 1 returned %d results", len(rs))
	}
	if rs, _ := f.idx.Search(t.Context(), search.Query{Text: "Tokyo", Roots: everything}); len(rs) != 1 || !rs[0].Day.Equal(time.Date(2025, 3, 9, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("dated result Day = %v", rs)
	}
}

func TestSearchRejectsBadQueries(t *testing.T) {
	f := newFixture(t, corpus, nil)
	for _, q := range []search.Query{
		{Text: " ", Roots: everything},
		{Text: strings.Repeat("x", 5000), Roots: everything},
		{Text: "tea"},
		{Text: "tea", Roots: everything, Max: -1},
		{Text: "tea", Roots: everything, Max: 101},
	} {
		if _, err := f.idx.Search(t.Context(), q); err == nil {
			t.Errorf("Search(%.20q, %d roots, max %d) succeeded", q.Text, len(q.Roots), q.Max)
		}
	}
}

func TestDecay(t *testing.T) {
	text := "- renewed the passport at the consulate\n"
	f := newFixture(t, map[string]string{
		"memory/2025-03-10.md": text,
		"memory/2025-01-09.md": text, // 60 days older
		"memory/passport.md":   text, // not dated: no decay
	}, nil)
	rs, err := f.idx.Search(t.Context(), search.Query{Text: "passport consulate", Roots: everything})
	if err != nil || len(rs) != 3 {
		t.Fatalf("Search = %v, %v", paths(rs), err)
	}
	score := map[string]float64{}
	for _, r := range rs {
		score[r.Path] = r.Score
	}
	if rs[2].Path != "memory/2025-01-09.md" {
		t.Errorf("old note ranked %v", paths(rs))
	}
	if got := score["memory/2025-01-09.md"] / score["memory/2025-03-10.md"]; math.Abs(got-0.25) > 0.01 {
		t.Errorf("60-day-old note scores %.3f of today's, want 0.25 (30-day half-life)", got)
	}
	if score["memory/passport.md"] != score["memory/2025-03-10.md"] {
		t.Errorf("undated note %v vs today's %v: want equal", score["memory/passport.md"], score["memory/2025-03-10.md"])
	}
}

func TestIncrementalIndexing(t *testing.T) {
	f := newFixture(t, corpus, nil)
	ctx := t.Context()
	st := f.idx.Stats()
	if st.Indexed != int64(len(corpus)) || st.Scans != 1 {
		t.Fatalf("first scan: %+v, want %d indexed", st, len(corpus))
	}
	rep, err := f.idx.Sync(ctx)
	if err != nil || rep != (search.Report{Unchanged: len(corpus)}) {
		t.Fatalf("second scan = %+v, %v; want everything unchanged", rep, err)
	}
	if st2 := f.idx.Stats(); st2.Indexed != st.Indexed {
		t.Errorf("unchanged files re-indexed: %+v", st2)
	}

	// Content change: that file alone is re-indexed.
	f.write(t, u+"2025-03-09.md", "# 2025-03-09\n\n- Alice cancelled the Osaka trip.\n")
	// Same content rewritten (new mtime): hashed, not re-indexed.
	old := corpus[u+"2025-03-08.md"]
	f.write(t, u+"2025-03-08.md", old)
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(f.dir, u+"2025-03-08.md"), later, later); err != nil {
		t.Fatal(err)
	}
	// Deleted file: removed.
	if err := os.Remove(filepath.Join(f.dir, u+"project.md")); err != nil {
		t.Fatal(err)
	}
	// A new file, a non-memory file and a hidden folder.
	f.write(t, "memory/2025-03-10.md", "- lunch with Bob at noon\n")
	f.write(t, "memory/notes.txt", "lunch")
	f.write(t, "memory/.trash/old.md", "lunch")
	f.write(t, "AGENT.md", "lunch")
	rep, err = f.idx.Sync(ctx)
	want := search.Report{Indexed: 2, Removed: 1, Unchanged: len(corpus) - 2}
	if err != nil || rep != want {
		t.Fatalf("scan after edits = %+v, %v; want %+v", rep, err, want)
	}
	if rs, _ := f.idx.Search(ctx, search.Query{Text: "Tokyo", Roots: everything}); len(rs) != 0 {
		t.Errorf("old content still found: %v", paths(rs))
	}
	if rs, _ := f.idx.Search(ctx, search.Query{Text: "Osaka", Roots: everything}); len(rs) != 1 {
		t.Errorf("new content not found: %v", paths(rs))
	}
	if rs, _ := f.idx.Search(ctx, search.Query{Text: "数据库", Roots: everything}); len(rs) != 0 {
		t.Errorf("deleted file still found: %v", paths(rs))
	}
	if rs, _ := f.idx.Search(ctx, search.Query{Text: "lunch", Roots: everything}); !slices.Equal(paths(rs), []string{"memory/2025-03-10.md"}) {
		t.Errorf("lunch = %v, want only the memory file", paths(rs))
	}

	// Update indexes one file at once, and removes a deleted one.
	f.write(t, u+"MEMORY.md", "- Alice now prefers oolong\n")
	before := f.idx.Stats()
	if err := f.idx.Update(ctx, "./"+u+"MEMORY.md"); err != nil {
		t.Fatal(err)
	}
	if rs, _ := f.idx.Search(ctx, search.Query{Text: "oolong", Roots: everything}); len(rs) != 1 {
		t.Errorf("Update did not index: %v", paths(rs))
	}
	if err := os.Remove(filepath.Join(f.dir, u+"MEMORY.md")); err != nil {
		t.Fatal(err)
	}
	if err := f.idx.Update(ctx, u+"MEMORY.md"); err != nil {
		t.Fatal(err)
	}
	after := f.idx.Stats()
	if after.Indexed != before.Indexed+1 || after.Removed != before.Removed+1 {
		t.Errorf("Update counters: before %+v after %+v", before, after)
	}
	for _, bad := range []string{"AGENT.md", "../x.md", "memory/a.txt"} {
		if err := f.idx.Update(ctx, bad); err == nil {
			t.Errorf("Update(%q) succeeded", bad)
		}
	}

	// The index survives a reopen: nothing is re-indexed.
	if err := f.idx.Close(); err != nil {
		t.Fatal(err)
	}
	idx, err := search.Open(search.Options{Root: f.root, Path: f.path, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	rep, err = idx.Sync(ctx)
	if err != nil || rep.Indexed != 0 || rep.Removed != 0 {
		t.Errorf("scan after reopen = %+v, %v; want nothing re-indexed", rep, err)
	}
	if rs, _ := idx.Search(ctx, search.Query{Text: "Osaka", Roots: everything}); len(rs) != 1 {
		t.Errorf("reopened index lost content: %v", paths(rs))
	}
}

func TestScopeFiltering(t *testing.T) {
	f := newFixture(t, map[string]string{
		"memory/users/telegram/100/MEMORY.md":            "- Alice: surprise party for Bob on Friday\n",
		"memory/users/telegram/200/MEMORY.md":            "- Bob: party planning is stressful\n",
		"memory/users/telegram/1000/MEMORY.md":           "- Carol: party at the lake\n",
		"memory/chats/telegram/-500/2025-03-09.md":       "- group agreed: party snacks from the bakery\n",
		"memory/chats/telegram/-500/users/100/MEMORY.md": "- Alice in the group: party playlist is hers\n",
		"memory/chats/telegram/-500/users/200/MEMORY.md": "- Bob in the group: party games\n",
		"memory/chats/telegram/-600/2025-03-09.md":       "- other group: party cancelled\n",
		"memory/2025-03-09.md":                           "- shared: party room booked\n",
		"MEMORY.md":                                      "- shared core: party budget 100\n",
	}, nil)
	root, err := os.OpenRoot(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	n, err := notes.New(root, notes.Options{Scope: memcfg.ScopeUser})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		s    notes.Scope
		want []string
	}{
		{"alice in group", notes.Scope{Speaker: bus.Speaker{Channel: "telegram", ChatID: "-500", UserID: "100", IsGroup: true}},
			[]string{"MEMORY.md", "memory/2025-03-09.md", "memory/chats/telegram/-500/2025-03-09.md", "memory/chats/telegram/-500/users/100/MEMORY.md"}},
		{"bob in group", notes.Scope{Speaker: bus.Speaker{Channel: "telegram", ChatID: "-500", UserID: "200", IsGroup: true}},
			[]string{"MEMORY.md", "memory/2025-03-09.md", "memory/chats/telegram/-500/2025-03-09.md", "memory/chats/telegram/-500/users/200/MEMORY.md"}},
		{"bob private", notes.Scope{Speaker: bus.Speaker{Channel: "telegram", ChatID: "200", UserID: "200"}},
			[]string{"MEMORY.md", "memory/2025-03-09.md", "memory/users/telegram/200/MEMORY.md"}},
	} {
		roots, err := n.Readable(tt.s)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := f.idx.Search(t.Context(), search.Query{Text: "party", Roots: roots})
		if err != nil {
			t.Fatal(err)
		}
		got := paths(rs)
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: found %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	path := filepath.Join(t.TempDir(), "idx.db")
	for _, o := range []search.Options{{Path: path}, {Root: root}, {Root: root, Path: path, Interval: -1}} {
		if _, err := search.Open(o); err == nil {
			t.Errorf("Open(%+v) succeeded", o)
		}
	}
	idx, err := search.Open(search.Options{Root: root, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := search.Open(search.Options{Root: root, Path: path, LockTimeout: 10 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Errorf("second Open = %v, want a lock error", err)
	}
	if err := idx.Close(); err != nil {
		t.Fatal(err)
	}
	if err := idx.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := idx.Sync(t.Context()); !errors.Is(err, search.ErrClosed) {
		t.Errorf("Sync after Close = %v", err)
	}
	if _, err := idx.Search(t.Context(), search.Query{Text: "x", Roots: everything}); !errors.Is(err, search.ErrClosed) {
		t.Errorf("Search after Close = %v", err)
	}
	if err := idx.Run(t.Context()); !errors.Is(err, search.ErrClosed) {
		t.Errorf("Run after Close = %v", err)
	}
}

func TestRunRescansOnTouch(t *testing.T) {
	scans := make(chan search.Report, 16)
	f := newFixture(t, map[string]string{"MEMORY.md": "- first\n"}, func(o *search.Options) {
		o.Interval = time.Hour
		o.OnScan = func(r search.Report, err error) {
			if err != nil {
				t.Errorf("scan: %v", err)
			}
			scans <- r
		}
	})
	ctx, cancel := contextWithCancel(t)
	done := make(chan error, 1)
	go func() { done <- f.idx.Run(ctx) }()
	wait := func() search.Report {
		t.Helper()
		select {
		case r := <-scans:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no rescan within 10s")
			return search.Report{}
		}
	}
	if r := wait(); r.Unchanged != 1 {
		t.Errorf("initial Run scan = %+v", r)
	}
	f.write(t, "memory/2025-03-10.md", "- second\n")
	f.idx.Touch()
	f.idx.Touch() // merges with the first
	if r := wait(); r.Indexed != 1 {
		t.Errorf("scan after Touch = %+v, want the new file indexed", r)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// embedServer speaks the OpenAI /embeddings API. Each text becomes a
// vector over a few topics, so synonyms are close without sharing words.
type embedServer struct {
	*httptest.Server
	calls  atomic.Int64
	fail   atomic.Bool
	mu     sync.Mutex
	inputs []string
	models []string
}

var topics = [][]string{
	{"car", "automobile", "vehicle", "sedan"},
	{"dog", "puppy", "canine"},
	{"tea", "oolong", "matcha"},
	{"holiday", "vacation", "trip"},
}

func embedOf(text string) []float32 {
	v := make([]float32, len(topics)+1)
	v[len(topics)] = 0.05 // never the zero vector
	low := strings.ToLower(text)
	for i, words := range topics {
		for _, w := range words {
			if strings.Contains(low, w) {
				v[i]++
			}
		}
	}
	return v
}

func newEmbedServer(t *testing.T) *embedServer {
	s := &embedServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" || r.Header.Get("Authorization") != "Bearer sk-test" {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		if s.fail.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":{"message":"embedding backend down","type":"server_error"}}`))
			return
		}
		var req struct {
			Input []string `json:"input"`
			Model string   `json:"model"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Input) == 0 {
			http.Error(w, `{"error":{"message":"input must be a non-empty array of strings"}}`, http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.inputs = append(s.inputs, req.Input...)
		s.models = append(s.models, req.Model)
		s.mu.Unlock()
		type item struct {
			Object    string    `json:"object"`
			Embedding []float32 `json:"embedding"`
			Index     int       `json:"index"`
		}
		resp := struct {
			Object string         `json:"object"`
			Data   []item         `json:"data"`
			Model  string         `json:"model"`
			Usage  map[string]int `json:"usage"`
		}{Object: "list", Model: req.Model, Usage: map[string]int{"prompt_tokens": len(req.Input), "total_tokens": len(req.Input)}}
		// Answer in reverse order: clients must place vectors by index.
		for i := len(req.Input) - 1; i >= 0; i-- {
			resp.Data = append(resp.Data, item{Object: "embedding", Embedding: embedOf(req.Input[i]), Index: i})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(s.Close)
	return s
}

func newEmbedder(t *testing.T, s *embedServer, model string) *search.OpenAIEmbedder {
	t.Helper()
	e, err := search.NewOpenAIEmbedder(search.EmbedderConfig{BaseURL: s.URL + "/v1", APIKey: "sk-test", Model: model, HTTPClient: s.Client(), BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEmbeddingsHybrid(t *testing.T) {
	srv := newEmbedServer(t)
	files := map[string]string{
		"memory/cars.md":   "- Bob drives an old sedan to work\n",
		"memory/dogs.md":   "- Alice walks her puppy every morning\n",
		"memory/travel.md": "- vacation in Portugal planned for June; Bob wants to rent a vehicle there\n",
	}
	f := newFixture(t, files, func(o *search.Options) { o.Embedder = newEmbedder(t, srv, "test-embed-1") })
	if st := f.idx.Stats(); st.Embedded != 3 || st.EmbedErrs != 0 {
		t.Fatalf("stats after indexing = %+v, want 3 chunks embedded", st)
	}
	srv.mu.Lock()
	if len(srv.inputs) != 3 || srv.models[0] != "test-embed-1" {
		t.Errorf("server saw inputs %q, models %v", srv.inputs, srv.models)
	}
	srv.mu.Unlock()

	// "automobile" appears in no note: only the vectors find the car notes.
	rs, err := f.idx.Search(t.Context(), search.Query{Text: "automobile", Roots: everything})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) < 2 || rs[0].Path != "memory/cars.md" || rs[0].Keyword != 0 || rs[0].Vector < 0.9 {
		t.Fatalf("automobile = %+v, want cars.md first by vector", rs)
	}
	if math.Abs(rs[0].Score-search.VectorWeight*rs[0].Vector) > 1e-9 {
		t.Errorf("vector-only score %v, want 0.7 × %v", rs[0].Score, rs[0].Vector)
	}
	// "vehicle" matches travel.md by keyword and by vector; cars.md by
	// vector alone: the hybrid ranks travel.md first.
	rs, _ = f.idx.Search(t.Context(), search.Query{Text: "vehicle", Roots: everything})
	if len(rs) < 2 || rs[0].Path != "memory/travel.md" || rs[1].Path != "memory/cars.md" {
		t.Fatalf("vehicle = %v", paths(rs))
	}
	if want := search.VectorWeight*rs[0].Vector + search.KeywordWeight*1; math.Abs(rs[0].Score-want) > 1e-9 {
		t.Errorf("hybrid score %v, want 0.7×%v + 0.3×1 = %v", rs[0].Score, rs[0].Vector, want)
	}
	calls := srv.calls.Load()
	if _, err := f.idx.Search(t.Context(), search.Query{Text: "vehicle", Roots: everything}); err != nil {
		t.Fatal(err)
	}
	if srv.calls.Load() != calls {
		t.Error("a repeated query was embedded again")
	}

	// The endpoint fails: search degrades to keywords, indexing keeps
	// keywords and counts the error.
	srv.fail.Store(true)
	rs, err = f.idx.Search(t.Context(), search.Query{Text: "puppy walks", Roots: everything})
	if err != nil || len(rs) != 1 || rs[0].Path != "memory/dogs.md" || rs[0].Vector != 0 {
		t.Errorf("search with the endpoint down = %+v, %v; want dogs.md by keyword", rs, err)
	}
	f.write(t, "memory/tea.md", "- Alice drinks matcha\n")
	if err := f.idx.Update(t.Context(), "memory/tea.md"); err != nil {
		t.Fatal(err)
	}
	if st := f.idx.Stats(); st.EmbedErrs != 1 {
		t.Errorf("EmbedErrs = %d, want 1", st.EmbedErrs)
	}
	if rs, _ := f.idx.Search(t.Context(), search.Query{Text: "matcha", Roots: everything}); len(rs) != 1 {
		t.Errorf("file indexed while embeddings fail not found by keyword: %v", paths(rs))
	}

	// Another model: every file is embedded again on the next scan.
	if err := f.idx.Close(); err != nil {
		t.Fatal(err)
	}
	srv.fail.Store(false)
	idx, err := search.Open(search.Options{Root: f.root, Path: f.path, Now: fixedNow, Embedder: newEmbedder(t, srv, "test-embed-2")})
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	rep, err := idx.Sync(t.Context())
	if err != nil || rep.Indexed != 4 {
		t.Errorf("scan with a new model = %+v, %v; want all 4 files re-embedded", rep, err)
	}
	if rs, _ := idx.Search(t.Context(), search.Query{Text: "oolong", Roots: everything}); len(rs) == 0 || rs[0].Path != "memory/tea.md" || rs[0].Vector < 0.9 {
		t.Errorf("oolong after re-embedding = %+v", rs)
	}
}

func TestEmbedderValidation(t *testing.T) {
	for _, c := range []search.EmbedderConfig{
		{BaseURL: "", Model: "m"},
		{BaseURL: "ftp://x", Model: "m"},
		{BaseURL: "http://x/v1"},
		{BaseURL: "http://x/v1", Model: "m", BatchSize: -1},
	} {
		if _, err := search.NewOpenAIEmbedder(c); err == nil {
			t.Errorf("NewOpenAIEmbedder(%+v) succeeded", c)
		}
	}
	// A server that answers with the wrong number of vectors.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[{"object":"embedding","embedding":[1,0],"index":0}],"model":"m"}`))
	}))
	defer srv.Close()
	e, err := search.NewOpenAIEmbedder(search.EmbedderConfig{BaseURL: srv.URL + "/v1", Model: "m", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Embed(t.Context(), []string{"a", "b"}); err == nil || !strings.Contains(err.Error(), "1 vectors for 2 inputs") {
		t.Errorf("Embed with a short answer = %v", err)
	}
	if v, err := e.Embed(t.Context(), []string{"a"}); err != nil || len(v) != 1 || len(v[0]) != 2 {
		t.Errorf("Embed = %v, %v", v, err)
	}
}

// TestTouchBurstIsOneRescan: every note written touches the index (a chat
// trimmed turn after turn writes its daily notes each time): the first
// touch rescans at once, the rest of a burst merges into one rescan a
// second later.
func TestTouchBurstIsOneRescan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		scans := 0
		f := newFixture(t, map[string]string{"MEMORY.md": "- first\n"}, func(o *search.Options) {
			o.Interval = time.Hour
			o.OnScan = func(search.Report, error) { mu.Lock(); scans++; mu.Unlock() }
		})
		count := func() int { synctest.Wait(); mu.Lock(); defer mu.Unlock(); return scans }
		ctx, cancel := contextWithCancel(t)
		done := make(chan error, 1)
		go func() { done <- f.idx.Run(ctx) }()
		if n := count(); n != 1 {
			t.Fatalf("scans after start = %d, want the initial one", n)
		}
		f.idx.Touch()
		if n := count(); n != 2 {
			t.Fatalf("scans after the first touch = %d, want 2 (a touch after a quiet time rescans at once)", n)
		}
		for i := range 50 {
			f.write(t, "memory/2025-03-10.md", strings.Repeat("- note\n", i+1))
			f.idx.Touch()
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		if n := count(); n != 3 {
			t.Errorf("scans after a burst of 50 touches = %d, want 3 (the burst merged into one)", n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}
