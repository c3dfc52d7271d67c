package logging

import "github.com/go-logr/logr"

// deferredValues is a logr.LogSink that keeps the key/value pairs of WithValues and hands
// them to the sink below (zapr's) only with a line that is written, instead of at once.
//
// Why: zapr's WithValues clones zap's encoder and encodes the values right away, about
// 1–2 KB from zap's buffer pool per call (more for a struct value, encoded by
// reflection). The controllers derive a logger with their keys (controller, namespace,
// name) for every sync, and almost none of those loggers writes a line at the default
// verbosity. When a shard starts working its partitions, thousands of syncs run in
// seconds, and those buffers, allocated while the Go collector marks, counted as live
// heap at the shard's peak (docs/performance.md). Here WithValues costs one slice
// append; a written line carries the pairs in the same order as before, so the output
// is the same.
type deferredValues struct {
	sink logr.LogSink
	kv   []any
}

// newDeferredValues wraps sink, which logr.New has already initialised: the wrapper adds
// one call frame between the caller and sink, which the sink's call depth accounts for.
func newDeferredValues(sink logr.LogSink) logr.LogSink {
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1)
	}
	return &deferredValues{sink: sink}
}

// Init is a no-op: the sink below was initialised when its own logger was made.
func (d *deferredValues) Init(logr.RuntimeInfo) {}

func (d *deferredValues) Enabled(level int) bool { return d.sink.Enabled(level) }

func (d *deferredValues) Info(level int, msg string, kv ...any) {
	d.sink.Info(level, msg, d.with(kv)...)
}

func (d *deferredValues) Error(err error, msg string, kv ...any) {
	d.sink.Error(err, msg, d.with(kv)...)
}

// with is the line's pairs after the kept ones.
func (d *deferredValues) with(kv []any) []any {
	if len(d.kv) == 0 {
		return kv
	}
	out := make([]any, 0, len(d.kv)+len(kv))
	return append(append(out, d.kv...), kv...)
}

func (d *deferredValues) WithValues(kv ...any) logr.LogSink {
	// A full slice expression: loggers derived from one parent never share a backing
	// array, so one's pairs cannot overwrite another's.
	return &deferredValues{sink: d.sink, kv: append(d.kv[:len(d.kv):len(d.kv)], kv...)}
}

func (d *deferredValues) WithName(name string) logr.LogSink {
	return &deferredValues{sink: d.sink.WithName(name), kv: d.kv}
}

func (d *deferredValues) WithCallDepth(depth int) logr.LogSink {
	cd, ok := d.sink.(logr.CallDepthLogSink)
	if !ok {
		return d
	}
	return &deferredValues{sink: cd.WithCallDepth(depth), kv: d.kv}
}

var _ logr.CallDepthLogSink = (*deferredValues)(nil)
