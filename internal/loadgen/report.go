package loadgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
)

// Result is what one run measured; its JSON form is the file of
// `switchboard bench --json` and `--compare`.
type Result struct {
	// What ran. Messages is per chat (0 when Options.Turns spread the
	// turns); Rate 0 is the closed loop. Tools, ModelLatencyMs and
	// ModelURL (an external model; "" is the scripted one in process) are
	// filled by Bench.
	Chats          int     `json:"chats"`
	Messages       int     `json:"messages"`
	Rate           float64 `json:"rate"`
	Tools          string  `json:"tools,omitempty"`
	ModelLatencyMs float64 `json:"model_latency_ms"`
	ModelURL       string  `json:"model_url,omitempty"`
	// What it measured.
	Turns          int     `json:"turns"`
	Seconds        float64 `json:"seconds"`
	TurnsPerSecond float64 `json:"turns_per_second"`
	P50Ms          float64 `json:"p50_ms"`
	P90Ms          float64 `json:"p90_ms"`
	P99Ms          float64 `json:"p99_ms"`
	MaxMs          float64 `json:"max_ms"`
	RSSBeforeBytes int64   `json:"rss_before_bytes"`
	RSSBytes       int64   `json:"rss_bytes"`
	BytesPerTurn   float64 `json:"bytes_per_turn"`
	AllocsPerTurn  float64 `json:"allocs_per_turn"`
	// Where the time went (phases.go), in milliseconds per turn: the mean
	// latency the client saw, and of it the daemon's turn, the model
	// requests in it and the history commit. Zero when the daemon's
	// metrics were not readable (Target.Metrics nil).
	MeanMs   float64 `json:"mean_ms"`
	TurnMs   float64 `json:"turn_ms,omitempty"`
	ModelMs  float64 `json:"model_ms,omitempty"`
	CommitMs float64 `json:"commit_ms,omitempty"`
	// Where it ran.
	GoVersion  string `json:"go_version"`
	GOMAXPROCS int    `json:"gomaxprocs"`
}

// WriteResult saves r as indented JSON in file.
func WriteResult(file string, r Result) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	if err := os.WriteFile(file, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("loadgen: write result: %w", err)
	}
	return nil
}

// ReadResult reads a result saved by WriteResult. A file that is not one
// (not JSON, unknown fields, no turns) is refused with its name.
func ReadResult(file string) (Result, error) {
	f, err := os.Open(file)
	if err != nil {
		return Result{}, fmt.Errorf("loadgen: read result: %w", err)
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	var r Result
	if err := dec.Decode(&r); err != nil {
		return Result{}, fmt.Errorf("loadgen: %s is not a result of switchboard bench --json: %w", file, err)
	}
	if r.Turns <= 0 || r.TurnsPerSecond <= 0 {
		return Result{}, fmt.Errorf("loadgen: %s is not a result of switchboard bench --json: %w", file, errors.New("it holds no turns"))
	}
	return r, nil
}

// Describe is the one-line description of what ran.
func (r Result) Describe() string {
	load := fmt.Sprintf("%d chats × %d messages", r.Chats, r.Messages)
	if r.Messages == 0 {
		load = fmt.Sprintf("%d turns over %d chats", r.Turns, r.Chats)
	}
	loop := "closed loop"
	if r.Rate > 0 {
		loop = fmt.Sprintf("open loop at %g messages/s", r.Rate)
	}
	tools := r.Tools
	if tools == "" {
		tools = "all"
	}
	model := fmt.Sprintf("model latency %g ms", r.ModelLatencyMs)
	if r.ModelURL != "" {
		model = "model " + r.ModelURL
	}
	return fmt.Sprintf("%s, %s, tools %s, %s, %s, GOMAXPROCS %d",
		load, loop, tools, model, r.GoVersion, r.GOMAXPROCS)
}

// row is one line of the printed table.
type row struct {
	name   string
	format string
	value  func(Result) float64
	phase  bool // a part of the mean, shown when the daemon's metrics were read
}

// nameWidth pads the names, so that they stay left-aligned in a table
// whose figures align right.
const nameWidth = 24

var rows = []row{
	{"turns", "%.0f", func(r Result) float64 { return float64(r.Turns) }, false},
	{"seconds", "%.3f", func(r Result) float64 { return r.Seconds }, false},
	{"turns/s", "%.1f", func(r Result) float64 { return r.TurnsPerSecond }, false},
	{"latency p50 (ms)", "%.2f", func(r Result) float64 { return r.P50Ms }, false},
	{"latency p90 (ms)", "%.2f", func(r Result) float64 { return r.P90Ms }, false},
	{"latency p99 (ms)", "%.2f", func(r Result) float64 { return r.P99Ms }, false},
	{"latency max (ms)", "%.2f", func(r Result) float64 { return r.MaxMs }, false},
	{"latency mean (ms)", "%.2f", func(r Result) float64 { return r.MeanMs }, false},
	{"  turn in daemon (ms)", "%.2f", func(r Result) float64 { return r.TurnMs }, true},
	{"    model calls (ms)", "%.2f", func(r Result) float64 { return r.ModelMs }, true},
	{"    history commit (ms)", "%.2f", func(r Result) float64 { return r.CommitMs }, true},
	{"  before the turn (ms)", "%.2f", func(r Result) float64 { return max(r.MeanMs-r.TurnMs, 0) }, true},
	{"rss before (MB)", "%.1f", func(r Result) float64 { return float64(r.RSSBeforeBytes) / (1 << 20) }, false},
	{"rss after (MB)", "%.1f", func(r Result) float64 { return float64(r.RSSBytes) / (1 << 20) }, false},
	{"allocated per turn (B)", "%.0f", func(r Result) float64 { return r.BytesPerTurn }, false},
	{"allocations per turn", "%.0f", func(r Result) float64 { return r.AllocsPerTurn }, false},
}

// Print writes r as a table. With base (the result saved in baseName) it
// adds the base's figures and the ratio of each (new / old: above 1 is
// more turns/s, or more latency and memory).
func Print(w io.Writer, r Result, base *Result, baseName string) error {
	fmt.Fprintf(w, "switchboard bench: %s\n", r.Describe())
	if base != nil {
		fmt.Fprintf(w, "compared with %s: %s\n", baseName, base.Describe())
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if base != nil {
		fmt.Fprintf(tw, "%-*s\tnow\tbefore\tratio\t\n", nameWidth, "")
	}
	for _, row := range rows {
		if row.phase && r.TurnMs == 0 {
			continue
		}
		fmt.Fprintf(tw, "%-*s\t"+row.format+"\t", nameWidth, row.name, row.value(r))
		if base != nil {
			fmt.Fprintf(tw, row.format+"\t%s\t", row.value(*base), ratio(row.value(r), row.value(*base)))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func ratio(now, before float64) string {
	if before == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", now/before)
}
