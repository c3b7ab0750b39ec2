package search_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/memory/notes"
	"github.com/switchboard-chat/switchboard/memory/search"
)

// benchWords is an English vocabulary; words are drawn with a Zipf
// distribution, so a few are very common, as in real notes.
var benchWords = strings.Fields(`meeting project budget deploy server database migration release customer
invoice travel flight hotel dinner family birthday doctor appointment gym running coffee tea book movie
music concert holiday weekend report review design feedback bug issue ticket backup schedule deadline
contract lawyer bank loan rent apartment car repair insurance garden recipe pasta salad kids school
homework teacher exam vacation beach mountain hiking camera phone laptop password account email call
interview salary promotion team manager colleague office remote conference talk slides demo launch
marketing sales pricing plan strategy roadmap quarter goal metric dashboard alert incident outage fix
patch upgrade version library framework api endpoint token cache queue message channel group chat
friend neighbour dog cat vet walk morning evening lunch breakfast market shopping gift present party`)

var benchCJK = []string{"今天开会讨论了项目进度", "下周去北京出差", "用户喜欢喝绿茶", "数据库迁移已经完成",
	"周末和家人去公园", "提醒我明天交报告", "服务器需要升级", "预算需要重新审核", "晚上七点吃饭", "孩子的学校放假"}

func writeBenchCorpus(b *testing.B, dir string, users, days int) {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 2, uint64(len(benchWords)-1))
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for u := range users {
		folder := filepath.Join(dir, "memory", "users", "telegram", fmt.Sprint(1000+u))
		if err := os.MkdirAll(folder, 0o700); err != nil {
			b.Fatal(err)
		}
		for d := range days {
			var s strings.Builder
			fmt.Fprintf(&s, "# %s\n\n", start.AddDate(0, 0, d).Format("2006-01-02"))
			for range 3 + rng.IntN(6) {
				s.WriteString("- ")
				for range 6 + rng.IntN(10) {
					s.WriteString(benchWords[zipf.Uint64()])
					s.WriteByte(' ')
				}
				if rng.IntN(4) == 0 {
					s.WriteString(benchCJK[rng.IntN(len(benchCJK))])
				}
				s.WriteByte('\n')
			}
			name := start.AddDate(0, 0, d).Format("2006-01-02") + ".md"
			if err := os.WriteFile(filepath.Join(folder, name), []byte(s.String()), 0o600); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkSearch10000Notes indexes 10,000 daily notes (100 users × 100
// days) and measures search latency, reporting the median and the 99th
// percentile per query: "user" searches one user's readable roots (as
// memory_search does), "all" the whole memory folder.
func BenchmarkSearch10000Notes(b *testing.B) {
	dir := b.TempDir()
	writeBenchCorpus(b, dir, 100, 100)
	root, err := os.OpenRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	idx, err := search.Open(search.Options{Root: root, Path: filepath.Join(b.TempDir(), "idx.db"),
		Now: func() time.Time { return time.Date(2025, 4, 15, 12, 0, 0, 0, time.UTC) }})
	if err != nil {
		b.Fatal(err)
	}
	defer idx.Close()
	t0 := time.Now()
	rep, err := idx.Sync(b.Context())
	if err != nil || rep.Indexed != 10000 {
		b.Fatalf("Sync = %+v, %v", rep, err)
	}
	b.Logf("indexed %d notes in %s", rep.Indexed, time.Since(t0).Round(time.Millisecond))
	n, err := notes.New(root, notes.Options{Scope: memcfg.ScopeUser})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	queries := make([]string, 200)
	for i := range queries {
		if i%5 == 0 {
			queries[i] = benchCJK[rng.IntN(len(benchCJK))][:9] // three characters
			continue
		}
		queries[i] = benchWords[rng.IntN(len(benchWords))] + " " + benchWords[rng.IntN(len(benchWords))]
	}
	for _, tt := range []struct {
		name  string
		roots func(i int) []notes.Root
	}{
		{"user", func(i int) []notes.Root {
			r, err := n.Readable(notes.Scope{Speaker: bus.Speaker{Channel: "telegram", ChatID: fmt.Sprint(1000 + i%100), UserID: fmt.Sprint(1000 + i%100)}})
			if err != nil {
				b.Fatal(err)
			}
			return r
		}},
		{"all", func(int) []notes.Root {
			return []notes.Root{{Path: notes.CoreName}, {Path: notes.Dir, Dir: true, Recursive: true}}
		}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			var lat []time.Duration
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				q := search.Query{Text: queries[i%len(queries)], Roots: tt.roots(i)}
				s := time.Now()
				if _, err := idx.Search(b.Context(), q); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(s))
				i++
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
