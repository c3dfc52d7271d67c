package logging

import (
	"fmt"
	"io"
	"os"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// Formats are the values --log-format accepts.
var Formats = []string{"json", "console"}

// Options are the logging flags shared by the coordinator and the shard.
type Options struct {
	// Format is "json" (default) or "console".
	Format string
	// Verbosity is the highest logr V-level written; 0 is info only, as in klog's -v.
	Verbosity int
}

// NewOptions returns the defaults: JSON at verbosity 0.
func NewOptions() *Options { return &Options{Format: "json"} }

// AddFlags registers --log-format and -v/--v.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Format, "log-format", o.Format, "log format: json or console")
	fs.IntVarP(&o.Verbosity, "v", "v", o.Verbosity, "log verbosity: higher numbers log more detail (0-10)")
}

// Validate reports a bad flag value.
func (o *Options) Validate() error {
	if o.Format != "json" && o.Format != "console" {
		return fmt.Errorf("--log-format=%q: must be one of %v", o.Format, Formats)
	}
	if o.Verbosity < 0 || o.Verbosity > 10 {
		return fmt.Errorf("--v=%d: must be between 0 and 10", o.Verbosity)
	}
	return nil
}

// New builds the logger writing to w (os.Stderr when nil) and routes klog into it.
// The returned flush function syncs buffered output and should run before exit.
func New(o Options, w io.Writer) (logr.Logger, func(), error) {
	if err := o.Validate(); err != nil {
		return logr.Discard(), func() {}, err
	}
	if w == nil {
		w = os.Stderr
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	enc.EncodeDuration = zapcore.StringDurationEncoder
	var encoder zapcore.Encoder
	if o.Format == "console" {
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	} else {
		encoder = zapcore.NewJSONEncoder(enc)
	}
	// logr V(n) maps to zap level -n; enabling down to -Verbosity admits V(0..Verbosity).
	level := zap.NewAtomicLevelAt(zapcore.Level(-o.Verbosity))
	ws := zapcore.Lock(zapcore.AddSync(w))
	core := zapcore.NewCore(encoder, ws, level)
	z := zap.New(core, zap.AddCaller(), zap.ErrorOutput(ws))
	logger := logr.New(newDeferredValues(zapr.NewLoggerWithOptions(z, zapr.LogInfoLevel("v"), zapr.ErrorKey("err")).GetSink()))

	// client-go logs through klog; send it to the same sink with the same verbosity.
	klog.SetLogger(logger)
	klog.EnableContextualLogging(true)
	flush := func() {
		klog.Flush()
		_ = z.Sync()
	}
	return logger, flush, nil
}
