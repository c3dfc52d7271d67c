// Package logging builds the one logger every kshard process uses: zap underneath, logr
// on top (so code logs through klog.FromContext / logr), and client-go's klog routed into
// the same sink so its messages share the format and the output stream.
//
// JSON is the default because production log pipelines parse it; --log-format=console is
// meant for people reading a terminal.
package logging
