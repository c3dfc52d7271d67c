package endpointstress

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// auditSince returns what kube-apiserver wrote to its audit log at path since start (the
// log's os.Stat when the run began), across rotations: kube-apiserver rotates the log at
// --audit-log-maxsize (100 MB by default, two or three runs of the test), renaming it
// <name>-<time>.log and beginning a new one, so the run's lines may begin in a renamed
// file. They are the rest of the file the run began in, wherever it now is, every file
// rotated after it (their names sort by time) and the current file.
func auditSince(path string, start os.FileInfo) (r io.Reader, closeAll func(), err error) {
	rotated, err := filepath.Glob(strings.TrimSuffix(path, ".log") + "-*.log")
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(rotated)
	var files []*os.File
	closeAll = func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	var readers []io.Reader
	found := false
	for _, name := range append(rotated, path) {
		fi, err := os.Stat(name)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		first := os.SameFile(fi, start)
		if !found && !first {
			continue
		}
		found = true
		f, err := os.Open(name)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		files = append(files, f)
		if first {
			if _, err := f.Seek(start.Size(), io.SeekStart); err != nil {
				closeAll()
				return nil, nil, err
			}
		}
		readers = append(readers, f)
	}
	if !found {
		return nil, nil, fmt.Errorf("%s: the file the run began in is gone (not among %d rotated files)", path, len(rotated))
	}
	return io.MultiReader(readers...), closeAll, nil
}

// TestAuditSince checks that the run's part of the audit log is read whole across the
// log's rotations, and nothing from before the run.
func TestAuditSince(t *testing.T) {
	tests := []struct {
		name string
		// rotate renames the current log (as kube-apiserver does) after each of these
		// writes of the run; the last write stays in the current file.
		run     []string
		rotate  []bool
		wantErr bool
		remove  bool // the file the run began in is deleted
	}{
		{name: "no rotation", run: []string{"r1\n", "r2\n"}, rotate: []bool{false, false}},
		{name: "rotated once", run: []string{"r1\n", "r2\n"}, rotate: []bool{true, false}},
		{name: "rotated twice", run: []string{"r1\n", "r2\n", "r3\n"}, rotate: []bool{true, true, false}},
		{name: "rotated right at the end", run: []string{"r1\n"}, rotate: []bool{true}},
		{name: "the first file deleted", run: []string{"r1\n", "r2\n"}, rotate: []bool{true, false}, remove: true, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "kube-apiserver-audit.log")
			// An older rotated file and the current file's lines before the run.
			write(t, filepath.Join(dir, "kube-apiserver-audit-2026-01-01T00-00-00.000.log"), "old0\n")
			write(t, path, "before1\nbefore2\n")
			start, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			var first string
			for i, line := range tc.run {
				appendTo(t, path, line)
				if tc.rotate[i] {
					rotated := filepath.Join(dir, fmt.Sprintf("kube-apiserver-audit-2026-06-01T00-00-%02d.000.log", i))
					if err := os.Rename(path, rotated); err != nil {
						t.Fatal(err)
					}
					if first == "" {
						first = rotated
					}
					write(t, path, "")
				}
			}
			if tc.remove {
				if err := os.Remove(first); err != nil {
					t.Fatal(err)
				}
			}
			r, closeAll, err := auditSince(path, start)
			if tc.wantErr {
				if err == nil {
					closeAll()
					t.Fatal("auditSince: no error, want one")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer closeAll()
			got, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.Join(tc.run, ""); string(got) != want {
				t.Errorf("read %q, want %q", got, want)
			}
		})
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func appendTo(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
}
