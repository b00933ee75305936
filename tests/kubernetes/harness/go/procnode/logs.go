package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
)

// Container output is kept as a kubelet's CRI runtime keeps it: one file per run of
// the container, a line per write of "TIMESTAMP STREAM F|P TEXT", so that logs can
// be tailed, filtered by time, shown with timestamps, followed, and read for the
// previous run after a restart.

const maxLogLine = 16 * 1024

type logWriter struct {
	mu   sync.Mutex
	file *os.File
	wg   sync.WaitGroup
	// last holds the latest complete lines, for a termination message.
	last []string
}

func newLogWriter(path string) (*logWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &logWriter{file: f}, nil
}

// pump copies one stream (stdout or stderr) until its pipe closes.
func (w *logWriter) pump(stream string, r io.Reader) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		reader := bufio.NewReaderSize(r, maxLogLine)
		for {
			line, err := reader.ReadSlice('\n')
			if len(line) > 0 {
				full := line[len(line)-1] == '\n'
				w.write(stream, bytes.TrimSuffix(line, []byte("\n")), full)
			}
			if err != nil && err != bufio.ErrBufferFull {
				return
			}
		}
	}()
}

func (w *logWriter) write(stream string, text []byte, full bool) {
	tag := "P"
	if full {
		tag = "F"
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ts := time.Now().UTC().Format(time.RFC3339Nano)
	_, _ = w.file.WriteString(ts + " " + stream + " " + tag + " " + string(text) + "\n")
	if full {
		w.last = append(w.last, string(text))
		if len(w.last) > 80 {
			w.last = w.last[len(w.last)-80:]
		}
	}
}

// close waits for both streams to end (the container's processes have exited).
func (w *logWriter) close() {
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.file.Close()
}

// tail is the end of the output, as terminationMessagePolicy FallbackToLogsOnError
// reports it (at most 80 lines and 2 KiB).
func (w *logWriter) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	text := strings.Join(w.last, "\n")
	if len(text) > 2048 {
		text = text[len(text)-2048:]
	}
	return text
}

type logLine struct {
	at   time.Time
	text string
	full bool
}

func parseLogLine(raw string) (logLine, bool) {
	parts := strings.SplitN(raw, " ", 4)
	if len(parts) < 4 {
		return logLine{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, parts[0])
	if err != nil {
		return logLine{}, false
	}
	return logLine{at: at, text: parts[3], full: parts[2] == "F"}, true
}

func (l logLine) render(timestamps bool) string {
	out := l.text
	if l.full {
		out += "\n"
	}
	if timestamps {
		out = l.at.Format(time.RFC3339Nano) + " " + out
	}
	return out
}

// readLogs streams a log file per the API's options; with Follow it keeps going
// until done() says the run has ended and everything is read, or ctx ends.
func readLogs(ctx context.Context, path string, opts api.ContainerLogOpts, done func() bool) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		defer f.Close()
		var since time.Time
		if !opts.SinceTime.IsZero() {
			since = opts.SinceTime
		} else if opts.SinceSeconds > 0 {
			since = time.Now().Add(-time.Duration(opts.SinceSeconds) * time.Second)
		}
		reader := bufio.NewReader(f)
		var lines []logLine
		var pending string
		readAvailable := func() {
			for {
				chunk, err := reader.ReadString('\n')
				pending += chunk
				if err != nil {
					return
				}
				if line, ok := parseLogLine(strings.TrimSuffix(pending, "\n")); ok && !line.at.Before(since) {
					lines = append(lines, line)
				}
				pending = ""
			}
		}
		readAvailable()
		if opts.Tail > 0 && len(lines) > opts.Tail {
			lines = lines[len(lines)-opts.Tail:]
		}
		written := 0
		emit := func() bool {
			for _, line := range lines {
				out := line.render(opts.Timestamps)
				if opts.LimitBytes > 0 && written+len(out) > opts.LimitBytes {
					out = out[:opts.LimitBytes-written]
				}
				n, err := io.WriteString(pw, out)
				written += n
				if err != nil || (opts.LimitBytes > 0 && written >= opts.LimitBytes) {
					return false
				}
			}
			lines = lines[:0]
			return true
		}
		if !emit() || !opts.Follow {
			pw.Close()
			return
		}
		for {
			finished := done()
			readAvailable()
			if !emit() {
				break
			}
			if finished {
				break
			}
			select {
			case <-ctx.Done():
				pw.CloseWithError(ctx.Err())
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		pw.Close()
	}()
	return pr, nil
}
