// Package atomicfile replaces a file whole: the one helper for files the
// operator's commands write outside the workspace (`switchboard history
// export --out`, `switchboard bus context`).
//
// [Replace] writes into a temporary file (mode 0600) beside the target,
// syncs it and renames it over the target: a reader sees the old file or
// the new one, whole, and a failed write leaves no partial file under the
// name. Files inside the workspace go through workspace's confined
// helpers instead.
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
)

// Replace writes file through write into a temporary file (mode 0600) in
// file's folder, syncs it and renames it into place. On any error the
// temporary file is removed and file is left as it was. The folder must
// exist.
func Replace(file string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*.tmp")
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), file)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}
