package workspace

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/switchboard-chat/switchboard/internal/health"
)

// Check reports, for `switchboard check` (result name "workspace"),
// whether [Open] could use dir: it exists or can be created, is writable,
// and each of [PromptFiles] present in it is readable (the detail lists
// those present and those not). It creates nothing: the write probe is
// removed.
func Check(dir string) health.Result {
	r, done := health.CheckDirFirst("workspace", dir)
	if done {
		return r
	}
	var present, missing []string
	for _, name := range PromptFiles {
		p := filepath.Join(dir, name)
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, name)
			continue
		}
		if err == nil {
			_, err = f.Read(make([]byte, 1))
			f.Close()
			if errors.Is(err, io.EOF) {
				err = nil
			}
		}
		if err != nil {
			r.Status, r.Detail = health.Fail, fmt.Sprintf("%s is not readable: %v", p, err)
			return r
		}
		present = append(present, name)
	}
	detail := fmt.Sprintf("%s is writable", dir)
	if len(present) > 0 {
		detail += "; readable: " + strings.Join(present, ", ")
	}
	if len(missing) > 0 {
		detail += "; not present: " + strings.Join(missing, ", ")
	}
	r.Status, r.Detail = health.OK, detail
	return r
}
