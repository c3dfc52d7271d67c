// Package logging builds the one logger every kshard process uses: zap underneath, logr
// on top (so code logs through klog.FromContext / logr), and client-go's klog routed into
// the same sink so its messages share the format and the output stream. WithValues keeps
// its pairs until a line is written (deferred.go): a logger per sync costs a slice, not an
// encoded copy of zap's encoder.
//
// JSON is the default because production log pipelines parse it; --log-format=console is
// meant for people reading a terminal.
package logging
