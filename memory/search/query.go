package search

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/memory/notes"
)

// BM25 parameters and hybrid weights.
const (
	K1            = 1.2
	B             = 0.75
	VectorWeight  = 0.7
	KeywordWeight = 0.3
	// HalfLife is the age at which a dated note's score halves.
	HalfLife = 30 * 24 * time.Hour
	// DefaultMax and MaxResults bound Query.Max.
	DefaultMax = 10
	MaxResults = 100
	// maxQueryBytes bounds a query.
	maxQueryBytes = 4096
	// maxQueryCache bounds the cached query embeddings.
	maxQueryCache = 256
)

// Query is one search.
type Query struct {
	// Text is what to look for (required, at most 4096 bytes).
	Text string
	// Roots are the parts of the workspace the caller may read
	// (required; see notes.Notes.Readable). Nothing outside them is
	// returned, or read.
	Roots []notes.Root
	// Max is the most results returned (default 10, at most 100).
	Max int
}

// Result is one matching chunk of a memory file.
type Result struct {
	Path      string // workspace-relative, slash-separated
	StartLine int    // 1-based, inclusive
	EndLine   int
	Text      string
	// Score is the final score (higher is better): the keyword score
	// normalised to the best keyword hit, or with embeddings 0.7 × Vector
	// + 0.3 × that, times the age decay of dated notes.
	Score float64
	// Keyword is the raw BM25 score; Vector the cosine similarity (0
	// without embeddings).
	Keyword float64
	Vector  float64
	// Day is the date of a daily notes file (zero for other files).
	Day time.Time
}

// candidate is a chunk being ranked.
type candidate struct {
	key     string // chunk key
	keyword float64
	vector  float64
	hasVec  bool
	score   float64
}

// Search returns the chunks that best match q.Text among the files under
// q.Roots, best first. It reads a consistent snapshot of the index and
// may run concurrently with updates. When embeddings are configured but
// the query cannot be embedded, it falls back to keyword search (and
// logs why). An empty query, no roots, or Max out of range are errors.
func (x *Index) Search(ctx context.Context, q Query) ([]Result, error) {
	text := strings.TrimSpace(q.Text)
	switch {
	case text == "":
		return nil, errors.New("search: query is empty")
	case len(text) > maxQueryBytes:
		return nil, fmt.Errorf("search: query is %d bytes, more than %d", len(text), maxQueryBytes)
	case len(q.Roots) == 0:
		return nil, errors.New("search: no readable roots given")
	case q.Max < 0 || q.Max > MaxResults:
		return nil, fmt.Errorf("search: max results must be between 1 and %d, got %d", MaxResults, q.Max)
	}
	limit := cmp.Or(q.Max, DefaultMax)
	roots := pruneRoots(q.Roots)
	terms := queryTerms(text)
	var qvec []float32
	if x.emb != nil {
		v, err := x.queryVector(ctx, text)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("search: %w", ctx.Err())
			}
			x.log.Warn("query not embedded; keyword search only", "err", err)
		}
		qvec = v
	}
	if len(terms) == 0 && qvec == nil {
		return nil, nil
	}
	if err := x.begin(ctx); err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	defer x.mu.RUnlock()
	var results []Result
	err := x.db.View(func(tx *bolt.Tx) error {
		pool := limit
		if qvec != nil {
			pool = 2 * limit
		}
		kw := keywordCandidates(tx, terms, roots, pool)
		cands := make(map[string]*candidate, len(kw))
		var best float64
		for _, c := range kw {
			cands[c.key] = c
			best = max(best, c.keyword)
		}
		if qvec != nil {
			for _, c := range vectorCandidates(tx, qvec, roots, pool) {
				if have, ok := cands[c.key]; ok {
					have.vector, have.hasVec = c.vector, true
				} else {
					cands[c.key] = c
				}
			}
			vecs := tx.Bucket(bucketVecs)
			var buf []float32
			for _, c := range cands {
				if !c.hasVec {
					if v := vecs.Get([]byte(c.key)); v != nil {
						buf = decodeVec(v, buf)
						if len(buf) == len(qvec) {
							c.vector = max(dot(qvec, buf), 0)
						}
					}
				}
			}
		}
		now := x.now()
		today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, now.Location())
		list := make([]*candidate, 0, len(cands))
		for _, c := range cands {
			norm := 0.0
			if best > 0 {
				norm = c.keyword / best
			}
			c.score = norm
			if qvec != nil {
				c.score = VectorWeight*c.vector + KeywordWeight*norm
			}
			if day, ok := notes.DayOf(string(relOf([]byte(c.key))), now.Location()); ok {
				c.score *= decay(today.Sub(day))
			}
			list = append(list, c)
		}
		slices.SortFunc(list, func(a, b *candidate) int {
			if a.score != b.score {
				return cmp.Compare(b.score, a.score)
			}
			return strings.Compare(a.key, b.key)
		})
		chunks := tx.Bucket(bucketChunks)
		for _, c := range list[:min(limit, len(list))] {
			var ch chunk
			v := chunks.Get([]byte(c.key))
			if v == nil || json.Unmarshal(v, &ch) != nil {
				continue
			}
			rel := string(relOf([]byte(c.key)))
			r := Result{Path: rel, StartLine: ch.Start, EndLine: ch.End, Text: ch.Text, Score: c.score, Keyword: c.keyword, Vector: c.vector}
			if day, ok := notes.DayOf(rel, now.Location()); ok {
				r.Day = day
			}
			results = append(results, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	return results, nil
}

// decay is the factor of a dated note of the given age (from its day to
// today, in whole days): 1 for today or the future, 0.5 at HalfLife.
func decay(age time.Duration) float64 {
	if age <= 0 {
		return 1
	}
	return math.Exp(-math.Ln2 * float64(age) / float64(HalfLife))
}

// keywordCandidates scores the chunks under roots with BM25 and returns
// the best n. Postings are keyed term, path, chunk, so each root is one
// range scan per term: the cost follows what the caller may read, not the
// size of the whole index.
func keywordCandidates(tx *bolt.Tx, terms []string, roots []notes.Root, n int) []*candidate {
	if len(terms) == 0 {
		return nil
	}
	meta := tx.Bucket(bucketMeta)
	total := float64(getUint(meta, keyChunks))
	if total == 0 {
		return nil
	}
	avgdl := float64(getUint(meta, keyLength)) / total
	if avgdl == 0 {
		avgdl = 1
	}
	dfs := tx.Bucket(bucketTerms)
	scores := make(map[string]float64)
	c := tx.Bucket(bucketPost).Cursor()
	var prefix []byte
	for _, t := range terms {
		v := dfs.Get([]byte(t))
		if v == nil {
			continue
		}
		df, k := binary.Uvarint(v)
		if k <= 0 {
			continue
		}
		idf := math.Log(1 + (total-float64(df)+0.5)/(float64(df)+0.5))
		for _, r := range roots {
			prefix = append(append(prefix[:0], t...), 0)
			prefix = append(prefix, r.Path...)
			if r.Dir {
				prefix = append(prefix, '/')
			} else {
				prefix = append(prefix, 0)
			}
			scanRoot(c, prefix, r, func(k, v []byte) {
				ck := k[len(t)+1:]
				tf, n1 := binary.Uvarint(v)
				if n1 <= 0 {
					return
				}
				dl, n2 := binary.Uvarint(v[n1:])
				if n2 <= 0 {
					return
				}
				ftf, fdl := float64(tf), float64(dl)
				scores[string(ck)] += idf * ftf * (K1 + 1) / (ftf + K1*(1-B+B*fdl/avgdl))
			})
		}
	}
	out := make([]*candidate, 0, len(scores))
	for k, s := range scores {
		out = append(out, &candidate{key: k, keyword: s})
	}
	return topN(out, n, func(c *candidate) float64 { return c.keyword })
}

// scanRoot calls fn for every key with the given prefix, which ends with
// root r's path (and "/" for a folder). For a folder that is not
// recursive, the keys of its subfolders are skipped with one seek per
// subfolder instead of being read.
func scanRoot(c *bolt.Cursor, prefix []byte, r notes.Root, fn func(k, v []byte)) {
	k, v := c.Seek(prefix)
	for k != nil && bytes.HasPrefix(k, prefix) {
		if r.Dir && !r.Recursive {
			rest := k[len(prefix):]
			if i := bytes.IndexByte(rest, '/'); i >= 0 && i < bytes.IndexByte(rest, 0) {
				// Seek past "<prefix><subfolder>/": '0' follows '/'.
				next := append(append([]byte(nil), k[:len(prefix)+i]...), '/'+1)
				k, v = c.Seek(next)
				continue
			}
		}
		fn(k, v)
		k, v = c.Next()
	}
}

// pruneRoots drops roots that another root already covers, so no file is
// scanned twice.
func pruneRoots(roots []notes.Root) []notes.Root {
	covered := func(a, b notes.Root) bool { // b covers a
		switch {
		case !b.Dir:
			return !a.Dir && a.Path == b.Path
		case !a.Dir:
			return b.Contains(a.Path)
		case a.Path == b.Path:
			return b.Recursive || !a.Recursive
		default:
			return b.Recursive && strings.HasPrefix(a.Path, b.Path+"/")
		}
	}
	var out []notes.Root
	for i, a := range roots {
		dup := false
		for j, b := range roots {
			if i != j && covered(a, b) && (!covered(b, a) || j < i) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, a)
		}
	}
	return out
}

// vectorCandidates returns the n chunks under roots most similar to qvec.
func vectorCandidates(tx *bolt.Tx, qvec []float32, roots []notes.Root, n int) []*candidate {
	c := tx.Bucket(bucketVecs).Cursor()
	seen := make(map[string]bool)
	var out []*candidate
	var buf []float32
	for _, r := range roots {
		prefix := []byte(r.Path + "/")
		if !r.Dir {
			prefix = append([]byte(r.Path), 0)
		}
		scanRoot(c, prefix, r, func(k, v []byte) {
			if seen[string(k)] {
				return
			}
			seen[string(k)] = true
			buf = decodeVec(v, buf)
			if len(buf) != len(qvec) {
				return // from another model
			}
			out = append(out, &candidate{key: string(k), vector: max(dot(qvec, buf), 0), hasVec: true})
		})
	}
	return topN(out, n, func(c *candidate) float64 { return c.vector })
}

// topN sorts cs by score (then key) and keeps the first n.
func topN(cs []*candidate, n int, score func(*candidate) float64) []*candidate {
	slices.SortFunc(cs, func(a, b *candidate) int {
		if sa, sb := score(a), score(b); sa != sb {
			return cmp.Compare(sb, sa)
		}
		return strings.Compare(a.key, b.key)
	})
	return cs[:min(n, len(cs))]
}

// queryVector embeds a query, from a small cache when it was asked before.
func (x *Index) queryVector(ctx context.Context, text string) ([]float32, error) {
	x.qmu.Lock()
	v, ok := x.qcache[text]
	x.qmu.Unlock()
	if ok {
		return v, nil
	}
	vecs, err := x.emb.Embed(ctx, []string{text})
	if err != nil {
		return nil, err
	}
	if len(vecs) != 1 || len(vecs[0]) == 0 {
		return nil, fmt.Errorf("embedder returned %d vectors for one query", len(vecs))
	}
	v = normalize(slices.Clone(vecs[0]))
	x.qmu.Lock()
	if len(x.qcache) >= maxQueryCache {
		clear(x.qcache)
	}
	x.qcache[text] = v
	x.qmu.Unlock()
	return v, nil
}
