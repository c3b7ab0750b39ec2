// Package search indexes Switchboard's memory files (MEMORY.md and
// memory/**/*.md in the workspace) and answers memory_search queries.
//
// Keyword search is BM25 (k1 1.2, b 0.75) over chunks of whole lines.
// Words of space-separated scripts are lower-cased and lightly stemmed;
// CJK text is indexed as single characters and overlapping character
// pairs, and queried by pairs (or by the character for a one-character
// query), so it works without a dictionary. With an [Embedder], results
// are ranked by 0.7 × cosine similarity + 0.3 × keyword score (normalised
// to the best keyword hit). Notes in files named YYYY-MM-DD.md lose half
// their score every 30 days of age (counted in days up to today); other
// files do not decay.
//
// The index lives in its own bbolt file. It is updated incrementally:
// a file whose size, modification time and inode are unchanged is skipped,
// a changed file is re-indexed only if its SHA-256 changed, and deleted
// files are removed. [Index.Run] rescans in the background on a ticker and
// whenever [Index.Touch] is called; [Index.Update] re-indexes one file at
// once. Every query is restricted to the roots the caller may read.
package search

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/switchboard-chat/switchboard/internal/clock"
	"github.com/switchboard-chat/switchboard/memory/notes"
	"github.com/switchboard-chat/switchboard/workspace"
)

// Bucket names and meta keys.
var (
	bucketFiles  = []byte("files")
	bucketChunks = []byte("chunks")
	bucketPost   = []byte("postings")
	bucketVecs   = []byte("vectors")
	bucketTerms  = []byte("terms") // term -> document frequency (uvarint)
	bucketMeta   = []byte("meta")

	keySchema = []byte("schema")
	keyChunks = []byte("chunks")
	keyLength = []byte("length")
)

// schema is the layout version; an index of another version is rebuilt.
const schema = "1"

// Defaults and limits.
const (
	DefaultInterval    = time.Minute
	DefaultLockTimeout = time.Second
	// MaxFileBytes: only the first 4 MiB of a larger file are indexed.
	MaxFileBytes = 4 << 20
	// batchFiles and batchBytes bound the files written per transaction.
	batchFiles = 64
	batchBytes = 8 << 20
	// embedRetry is how long embedding is paused after a failure.
	embedRetry = 10 * time.Minute
)

// ErrClosed is returned (wrapped) by every method after Close.
var ErrClosed = errors.New("search: index closed")

// Options configure [Open].
type Options struct {
	// Root is the workspace (required); it must stay open while the index
	// is used.
	Root *os.Root
	// Path is the index file, e.g. data_dir/memory-index.db (required).
	Path string
	// Embedder, when set, adds vector search.
	Embedder Embedder
	// Interval is the background rescan period (default 1m).
	Interval time.Duration
	// LockTimeout is how long Open waits for another process holding the
	// file (default 1s).
	LockTimeout time.Duration
	// Now is the clock used for score decay (default time.Now).
	Now func() time.Time
	// Log receives warnings (failed embeddings, unreadable files); nil
	// discards.
	Log *slog.Logger
	// OnScan, when set, is called by Run after each rescan with what it
	// did (tests and metrics). It must not block.
	OnScan func(Report, error)
}

// Stats are cumulative counters of an index's work since Open.
type Stats struct {
	Scans     int64 // full rescans (Sync) completed
	Indexed   int64 // files (re-)indexed: new or with changed content
	Removed   int64 // files removed from the index (deleted from disk)
	Unchanged int64 // files found unchanged by a rescan (stamp or hash)
	Embedded  int64 // chunks given a vector
	EmbedErrs int64 // failed embedding requests
}

// Index is the memory search index. It is safe for concurrent use; the
// caller owns it and must Close it.
type Index struct {
	db       *bolt.DB
	path     string
	root     *os.Root
	emb      Embedder
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger
	touch    chan struct{}
	onScan   func(Report, error)

	// mu is held for reading by every operation and for writing by Close.
	mu     sync.RWMutex
	closed bool

	// syncMu serialises index writes (Sync, Update); embedPause is
	// guarded by it.
	syncMu     sync.Mutex
	embedPause time.Time

	scans, indexed, removed, unchanged, embedded, embedErrs atomic.Int64

	qmu    sync.Mutex
	qcache map[string][]float32 // query embeddings
}

// fileMeta is the value of the files bucket.
type fileMeta struct {
	Hash     string `json:"hash"`
	Size     int64  `json:"size"`
	MTime    int64  `json:"mtime"` // UnixNano
	Inode    uint64 `json:"inode,omitempty"`
	Chunks   int    `json:"chunks"`
	Embedded string `json:"embedded,omitempty"` // model of the vectors, "" for none
}

func (m fileMeta) sameStamp(fi fs.FileInfo) bool {
	return m.Size == fi.Size() && m.MTime == fi.ModTime().UnixNano() && m.Inode == workspace.Inode(fi)
}

// Open opens (creating if needed) the index file and its folder. It does
// not scan: call Run or Sync.
func Open(opts Options) (*Index, error) {
	if opts.Root == nil {
		return nil, errors.New("search: open: root is nil")
	}
	if opts.Path == "" {
		return nil, errors.New("search: open: path is empty")
	}
	if opts.Interval < 0 || opts.LockTimeout < 0 {
		return nil, fmt.Errorf("search: open %s: interval and lock timeout must not be negative", opts.Path)
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(opts.Path), 0o700); err != nil {
		return nil, fmt.Errorf("search: open %s: %w", opts.Path, err)
	}
	db, err := bolt.Open(opts.Path, 0o600, &bolt.Options{Timeout: opts.LockTimeout, FreelistType: bolt.FreelistMapType})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("search: index file %s is locked by another process (waited %s): %w", opts.Path, opts.LockTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("search: open %s: %w", opts.Path, err)
	}
	if err := db.Update(prepareBuckets); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("search: open %s: %w", opts.Path, err)
	}
	return &Index{
		db: db, path: opts.Path, root: opts.Root, emb: opts.Embedder, interval: opts.Interval,
		now: opts.Now, log: opts.Log.With("component", "memory-search"),
		touch: make(chan struct{}, 1), qcache: make(map[string][]float32), onScan: opts.OnScan,
	}, nil
}

// prepareBuckets creates the buckets, dropping an index of another schema.
func prepareBuckets(tx *bolt.Tx) error {
	all := [][]byte{bucketFiles, bucketChunks, bucketPost, bucketVecs, bucketTerms, bucketMeta}
	if m := tx.Bucket(bucketMeta); m != nil && string(m.Get(keySchema)) != schema {
		for _, name := range all {
			if tx.Bucket(name) != nil {
				if err := tx.DeleteBucket(name); err != nil {
					return fmt.Errorf("drop bucket %s: %w", name, err)
				}
			}
		}
	}
	for _, name := range all {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("bucket %s: %w", name, err)
		}
	}
	return tx.Bucket(bucketMeta).Put(keySchema, []byte(schema))
}

// Close closes the index file. It waits for operations in flight and is
// idempotent; later calls fail with [ErrClosed].
func (x *Index) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil
	}
	x.closed = true
	if err := x.db.Close(); err != nil {
		return fmt.Errorf("search: close %s: %w", x.path, err)
	}
	return nil
}

func (x *Index) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	x.mu.RLock()
	if x.closed {
		x.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// Stats returns the cumulative counters.
func (x *Index) Stats() Stats {
	return Stats{
		Scans: x.scans.Load(), Indexed: x.indexed.Load(), Removed: x.removed.Load(),
		Unchanged: x.unchanged.Load(), Embedded: x.embedded.Load(), EmbedErrs: x.embedErrs.Load(),
	}
}

// Touch asks Run for a rescan: at once after a quiet second, else a
// second after the last touch-driven one. It never blocks; touches made
// while a rescan is pending merge into one.
func (x *Index) Touch() {
	select {
	case x.touch <- struct{}{}:
	default:
	}
}

// Run keeps the index current until ctx ends: a rescan at once, then
// every Options.Interval and after each Touch. A failed rescan is logged
// and retried on the next tick. It returns nil when ctx ends, or
// [ErrClosed] if the index was closed under it.
func (x *Index) Run(ctx context.Context) error {
	t := time.NewTicker(x.interval)
	defer t.Stop()
	touched := false
	for {
		rep, err := x.Sync(ctx)
		if x.onScan != nil && ctx.Err() == nil {
			x.onScan(rep, err)
		}
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, ErrClosed):
				return err
			}
			x.log.Warn("memory index rescan failed", "err", err)
		}
		if touched {
			// Touches come with every note written (a chat trimmed turn
			// after turn writes its daily notes each time): after a
			// rescan a touch asked for, the next one waits touchGap, so a
			// burst costs two rescans, not one per write. Update indexes
			// a single file at once when it cannot wait.
			if err := clock.Sleep(ctx, touchGap); err != nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			touched = false
		case <-x.touch:
			touched = true
		}
	}
}

// touchGap is the least time between a touch and the rescan it asks for;
// touches within it merge into that rescan.
const touchGap = time.Second

// Report counts what one Sync did.
type Report struct {
	Indexed, Removed, Unchanged int
}

// Sync rescans the memory files now and brings the index up to date. It
// blocks until done; ctx is checked between batches of files.
func (x *Index) Sync(ctx context.Context) (Report, error) {
	if err := x.begin(ctx); err != nil {
		return Report{}, fmt.Errorf("search: sync: %w", err)
	}
	defer x.mu.RUnlock()
	x.syncMu.Lock()
	defer x.syncMu.Unlock()

	disk, err := x.listFiles()
	if err != nil {
		return Report{}, fmt.Errorf("search: sync: %w", err)
	}
	stored, err := x.storedFiles()
	if err != nil {
		return Report{}, fmt.Errorf("search: sync: %w", err)
	}
	var rep Report
	var gone []string
	for rel := range stored {
		if _, ok := disk[rel]; !ok {
			gone = append(gone, rel)
		}
	}
	slices.Sort(gone)
	for len(gone) > 0 {
		n := min(len(gone), 256)
		if err := x.db.Update(func(tx *bolt.Tx) error {
			for _, rel := range gone[:n] {
				if err := removeFile(tx, rel); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return rep, fmt.Errorf("search: sync: remove: %w", err)
		}
		rep.Removed += n
		x.removed.Add(int64(n))
		gone = gone[n:]
	}
	var work []string
	for rel, fi := range disk {
		if m, ok := stored[rel]; ok && m.sameStamp(fi) && !x.needsEmbed(m) {
			rep.Unchanged++
			continue
		}
		work = append(work, rel)
	}
	x.unchanged.Add(int64(rep.Unchanged))
	slices.Sort(work)
	for len(work) > 0 {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("search: sync: %w", err)
		}
		var docs []*doc
		size := 0
		for len(work) > 0 && len(docs) < batchFiles && size < batchBytes {
			rel := work[0]
			work = work[1:]
			d, err := x.load(rel, stored[rel])
			if errors.Is(err, fs.ErrNotExist) {
				d = &doc{rel: rel, gone: true}
			} else if err != nil {
				x.log.Warn("memory file not indexed", "file", rel, "err", err)
				continue
			}
			docs = append(docs, d)
			size += d.size
		}
		r, err := x.write(ctx, docs)
		rep.Indexed += r.Indexed
		rep.Removed += r.Removed
		rep.Unchanged += r.Unchanged
		if err != nil {
			return rep, fmt.Errorf("search: sync: %w", err)
		}
	}
	x.scans.Add(1)
	return rep, nil
}

// Update brings one file up to date at once: it is (re-)indexed when it
// changed and removed from the index when it no longer exists. rel is a
// workspace-relative path of an indexable memory file (see
// [notes.Indexable]); anything else is an error.
func (x *Index) Update(ctx context.Context, rel string) error {
	clean, ok := notes.Clean(rel)
	if !ok || !notes.Indexable(clean) {
		return fmt.Errorf("search: update %q: not a memory file", rel)
	}
	if err := x.begin(ctx); err != nil {
		return fmt.Errorf("search: update %s: %w", clean, err)
	}
	defer x.mu.RUnlock()
	x.syncMu.Lock()
	defer x.syncMu.Unlock()
	stored, err := x.storedFile(clean)
	if err != nil {
		return fmt.Errorf("search: update %s: %w", clean, err)
	}
	d, err := x.load(clean, stored)
	if errors.Is(err, fs.ErrNotExist) {
		d = &doc{rel: clean, gone: true}
	} else if err != nil {
		return fmt.Errorf("search: update %s: %w", clean, err)
	}
	if _, err := x.write(ctx, []*doc{d}); err != nil {
		return fmt.Errorf("search: update %s: %w", clean, err)
	}
	return nil
}

// needsEmbed reports whether a file's vectors are missing or from another
// model and embedding is not paused. syncMu is held.
func (x *Index) needsEmbed(m fileMeta) bool {
	return x.emb != nil && m.Embedded != x.emb.Model() && m.Chunks > 0 && !x.now().Before(x.embedPause)
}

// listFiles returns the indexable regular files on disk (symbolic links
// are not followed) with their Lstat information.
func (x *Index) listFiles() (map[string]fs.FileInfo, error) {
	out := make(map[string]fs.FileInfo)
	if fi, err := x.root.Lstat(notes.CoreName); err == nil && fi.Mode().IsRegular() {
		out[notes.CoreName] = fi
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	fsys := x.root.FS()
	err := fs.WalkDir(fsys, notes.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == notes.Dir {
				return fs.SkipAll
			}
			x.log.Warn("memory folder not scanned", "path", p, "err", err)
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if p != notes.Dir && d.Name()[0] == '.' {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !notes.Indexable(p) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil // deleted meanwhile
		}
		out[p] = fi
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", notes.Dir, err)
	}
	return out, nil
}

func (x *Index) storedFiles() (map[string]fileMeta, error) {
	out := make(map[string]fileMeta)
	err := x.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketFiles).ForEach(func(k, v []byte) error {
			var m fileMeta
			if err := json.Unmarshal(v, &m); err != nil {
				m = fileMeta{Hash: "invalid"} // re-indexed on this scan
			}
			out[string(k)] = m
			return nil
		})
	})
	return out, err
}

func (x *Index) storedFile(rel string) (fileMeta, error) {
	var m fileMeta
	err := x.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketFiles).Get([]byte(rel)); v != nil && json.Unmarshal(v, &m) != nil {
			m = fileMeta{Hash: "invalid"}
		}
		return nil
	})
	return m, err
}

// doc is a file prepared for writing.
type doc struct {
	rel    string
	gone   bool // removed from disk
	same   bool // content unchanged: only the stamp is updated
	meta   fileMeta
	chunks []chunk
	vecs   [][]float32
	size   int
}

// load reads rel and prepares its chunks, or marks it unchanged when its
// hash matches the stored one. Embedding happens in write.
func (x *Index) load(rel string, old fileMeta) (*doc, error) {
	fi, err := x.root.Lstat(rel)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fs.ErrNotExist // a symlink or folder is not indexed
	}
	// Through the workspace guard: a file swapped for a link meanwhile,
	// or one with several hard links (its other name may be in another
	// user's folder), is not indexed under this path.
	f, _, err := workspace.NewGuard(x.root, nil).NoSymlinks().Open(rel)
	if errors.Is(err, workspace.ErrDenied) || errors.Is(err, workspace.ErrHardLink) || errors.Is(err, workspace.ErrChanged) {
		x.log.Warn("memory file not indexed", "file", rel, "err", err)
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes))
	if err != nil {
		return nil, err
	}
	if fi.Size() > MaxFileBytes {
		if i := bytes.LastIndexByte(data, '\n'); i > 0 {
			data = data[:i+1]
		}
		x.log.Warn("memory file is large; only its start is indexed", "file", rel, "bytes", fi.Size())
	}
	sum := sha256.Sum256(data)
	d := &doc{rel: rel, size: len(data), meta: fileMeta{
		Hash: hex.EncodeToString(sum[:]), Size: fi.Size(), MTime: fi.ModTime().UnixNano(), Inode: workspace.Inode(fi),
	}}
	if old.Hash == d.meta.Hash && !x.needsEmbed(old) {
		d.same = true
		d.meta.Chunks, d.meta.Embedded = old.Chunks, old.Embedded
		return d, nil
	}
	d.chunks = splitChunks(string(bytes.ToValidUTF8(data, []byte("\uFFFD"))))
	d.meta.Chunks = len(d.chunks)
	return d, nil
}

// write embeds the changed docs (when an embedder is set and not paused)
// and stores all of them in one transaction. syncMu is held.
func (x *Index) write(ctx context.Context, docs []*doc) (Report, error) {
	var rep Report
	if x.emb != nil && !x.now().Before(x.embedPause) {
		var texts []string
		for _, d := range docs {
			for _, c := range d.chunks {
				texts = append(texts, c.Text)
			}
		}
		if len(texts) > 0 {
			vecs, err := x.emb.Embed(ctx, texts)
			if err == nil && len(vecs) != len(texts) {
				err = fmt.Errorf("%d vectors for %d texts", len(vecs), len(texts))
			}
			if err != nil && ctx.Err() != nil {
				return rep, ctx.Err() // shutting down: not the endpoint's fault
			}
			if err != nil {
				x.embedErrs.Add(1)
				x.embedPause = x.now().Add(embedRetry)
				x.log.Warn("memory embeddings failed; keyword search only until they work again", "err", err, "retry_in", embedRetry)
			} else {
				for _, d := range docs {
					d.vecs, vecs = vecs[:len(d.chunks)], vecs[len(d.chunks):]
					d.meta.Embedded = x.emb.Model()
				}
				x.embedded.Add(int64(len(texts)))
			}
		}
	}
	err := x.db.Update(func(tx *bolt.Tx) error {
		for _, d := range docs {
			switch {
			case d.gone:
				if err := removeFile(tx, d.rel); err != nil {
					return err
				}
			case d.same:
				if err := putJSON(tx.Bucket(bucketFiles), []byte(d.rel), d.meta); err != nil {
					return err
				}
			default:
				if err := removeFile(tx, d.rel); err != nil {
					return err
				}
				if err := insertFile(tx, d); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	for _, d := range docs {
		switch {
		case d.gone:
			rep.Removed++
			x.removed.Add(1)
		case d.same:
			rep.Unchanged++
			x.unchanged.Add(1)
		default:
			rep.Indexed++
			x.indexed.Add(1)
		}
	}
	return rep, nil
}

// chunkKey is rel + 0x00 + big-endian uint32 chunk number.
func chunkKey(rel string, i int) []byte {
	k := make([]byte, len(rel)+5)
	copy(k, rel)
	binary.BigEndian.PutUint32(k[len(rel)+1:], uint32(i))
	return k
}

// relOf returns the file path of a chunk key.
func relOf(ck []byte) []byte { return ck[:len(ck)-5] }

// postKey is term + 0x00 + chunk key.
func postKey(term string, ck []byte) []byte {
	k := make([]byte, 0, len(term)+1+len(ck))
	k = append(k, term...)
	k = append(k, 0)
	return append(k, ck...)
}

// removeFile deletes a file's chunks, postings and vectors and its entry.
func removeFile(tx *bolt.Tx, rel string) error {
	files := tx.Bucket(bucketFiles)
	v := files.Get([]byte(rel))
	if v == nil {
		return nil
	}
	var m fileMeta
	_ = json.Unmarshal(v, &m) // an undecodable entry: remove by prefix below
	chunks, post, vecs, terms := tx.Bucket(bucketChunks), tx.Bucket(bucketPost), tx.Bucket(bucketVecs), tx.Bucket(bucketTerms)
	var delChunks, delLen uint64
	prefix := append([]byte(rel), 0)
	c := chunks.Cursor()
	var keys [][]byte
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(k) == len(prefix)+4; k, v = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
		var ch chunk
		if json.Unmarshal(v, &ch) != nil {
			continue
		}
		for _, t := range ch.Terms {
			pk := postKey(t, k)
			if post.Get(pk) == nil {
				continue
			}
			if err := post.Delete(pk); err != nil {
				return fmt.Errorf("delete posting: %w", err)
			}
			if err := addDF(terms, t, -1); err != nil {
				return err
			}
		}
		delChunks++
		delLen += uint64(ch.Len)
	}
	for _, k := range keys {
		if err := chunks.Delete(k); err != nil {
			return fmt.Errorf("delete chunk: %w", err)
		}
		if err := vecs.Delete(k); err != nil {
			return fmt.Errorf("delete vector: %w", err)
		}
	}
	if err := addCounters(tx, -int64(delChunks), -int64(delLen)); err != nil {
		return err
	}
	return files.Delete([]byte(rel))
}

// insertFile stores a prepared doc's chunks, postings and vectors.
func insertFile(tx *bolt.Tx, d *doc) error {
	chunks, post, vecs, terms := tx.Bucket(bucketChunks), tx.Bucket(bucketPost), tx.Bucket(bucketVecs), tx.Bucket(bucketTerms)
	var total int64
	var buf [2 * binary.MaxVarintLen64]byte
	for i, c := range d.chunks {
		ck := chunkKey(d.rel, i)
		if err := putJSON(chunks, ck, c); err != nil {
			return err
		}
		for _, t := range c.Terms {
			n := binary.PutUvarint(buf[:], uint64(c.tf[t]))
			n += binary.PutUvarint(buf[n:], uint64(c.Len))
			if err := post.Put(postKey(t, ck), append([]byte(nil), buf[:n]...)); err != nil {
				return fmt.Errorf("put posting: %w", err)
			}
			if err := addDF(terms, t, 1); err != nil {
				return err
			}
		}
		if d.vecs != nil {
			if err := vecs.Put(ck, encodeVec(normalize(d.vecs[i]))); err != nil {
				return fmt.Errorf("put vector: %w", err)
			}
		}
		total += int64(c.Len)
	}
	if err := addCounters(tx, int64(len(d.chunks)), total); err != nil {
		return err
	}
	return putJSON(tx.Bucket(bucketFiles), []byte(d.rel), d.meta)
}

// addDF adds delta to a term's document frequency, deleting it at 0.
func addDF(b *bolt.Bucket, term string, delta int64) error {
	var df int64
	if v := b.Get([]byte(term)); v != nil {
		u, n := binary.Uvarint(v)
		if n > 0 {
			df = int64(u)
		}
	}
	df += delta
	if df <= 0 {
		if err := b.Delete([]byte(term)); err != nil {
			return fmt.Errorf("delete term: %w", err)
		}
		return nil
	}
	var buf [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(buf[:], uint64(df))
	if err := b.Put([]byte(term), append([]byte(nil), buf[:n]...)); err != nil {
		return fmt.Errorf("put term: %w", err)
	}
	return nil
}

func addCounters(tx *bolt.Tx, chunks, length int64) error {
	m := tx.Bucket(bucketMeta)
	for _, kv := range []struct {
		key []byte
		add int64
	}{{keyChunks, chunks}, {keyLength, length}} {
		v := int64(getUint(m, kv.key)) + kv.add
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(max(v, 0)))
		if err := m.Put(kv.key, b[:]); err != nil {
			return fmt.Errorf("put counter: %w", err)
		}
	}
	return nil
}

func getUint(b *bolt.Bucket, key []byte) uint64 {
	v := b.Get(key)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	if err := b.Put(key, data); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

func encodeVec(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func decodeVec(b []byte, into []float32) []float32 {
	into = into[:0]
	for i := 0; i+4 <= len(b); i += 4 {
		into = append(into, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
	}
	return into
}
