package dashcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kshard/kshard/test/framework"
)

// Binary builds Prometheus into the tool cache if it is missing (hack/tools.sh returns at
// once when it is there) and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	tools := filepath.Join(framework.RepoRoot(), "hack", "tools.sh")
	if out, err := exec.Command(tools, "prometheus").CombinedOutput(); err != nil {
		t.Fatalf("hack/tools.sh prometheus: %v\n%s", err, out)
	}
	out, err := exec.Command(tools, "path", "prometheus").Output()
	if err != nil {
		t.Fatalf("hack/tools.sh path prometheus: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// Options say how to run a Prometheus.
type Options struct {
	// Config is the body of prometheus.yml.
	Config string
	// Dir holds prometheus.yml and whatever the caller writes beside it (file_sd files).
	Dir string
	// Wrap is a command the server runs under, e.g. nsenter into a network namespace;
	// empty runs it on the host.
	Wrap []string
	// Socket, with Wrap, makes the test reach the server through a Unix socket: a socat
	// relay under Wrap listens on it and connects to the server's address in there.
	// Unix socket paths are shared between network namespaces; TCP addresses are not.
	Socket bool
}

// Server is a running Prometheus and a client of its HTTP API.
type Server struct {
	URL    string
	client *http.Client
}

// Start runs Prometheus with opts until the test ends and waits until it is ready.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := Binary(t)
	cfg := filepath.Join(opts.Dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(opts.Config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t))
	args := []string{bin, "--config.file=" + cfg, "--storage.tsdb.path=" + t.TempDir(),
		"--web.listen-address=" + addr, "--storage.tsdb.retention.time=1h"}
	s := &Server{URL: "http://" + addr, client: &http.Client{}}
	if len(opts.Wrap) > 0 {
		args = append(append([]string(nil), opts.Wrap...), args...)
	}
	framework.Start(t, "prometheus", args[0], args[1:]...)
	if opts.Socket {
		// A folder of its own under the system's temporary folder: a Unix socket's path
		// must stay under 108 bytes, which an artifacts folder named after a test may not.
		sockDir, err := os.MkdirTemp("", "kshard-prom-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
		sock := filepath.Join(sockDir, "prometheus.sock")
		relay := append(append([]string(nil), opts.Wrap...), "socat", "UNIX-LISTEN:"+sock+",fork,mode=600,unlink-early", "TCP:"+addr)
		framework.Start(t, "prometheus-relay", relay[0], relay[1:]...)
		s.URL = "http://prometheus"
		s.client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	}
	framework.Eventually(t, 60*time.Second, "Prometheus is ready", func(ctx context.Context) (bool, error) {
		code, body, err := s.do(ctx, "/-/ready", nil)
		if err != nil {
			return false, err
		}
		if code != http.StatusOK {
			return false, fmt.Errorf("/-/ready: %d %.200s", code, body)
		}
		return true, nil
	})
	return s
}

func (s *Server) do(ctx context.Context, path string, params url.Values) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := s.URL + path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	return framework.HTTPGetWith(ctx, s.client, u)
}

// Result is the data of a /api/v1/query or /api/v1/query_range answer.
type Result struct {
	ResultType string `json:"resultType"`
	Result     []struct {
		Metric map[string]string `json:"metric"`
		Value  []any             `json:"value"`  // instant: [time, "value"]
		Values [][]any           `json:"values"` // range: [[time, "value"], ...]
	} `json:"result"`
}

// get calls a Prometheus HTTP API path and decodes the "data" of a success answer into out.
func (s *Server) get(ctx context.Context, path string, params url.Values, out any) error {
	code, body, err := s.do(ctx, path, params)
	if err != nil {
		return err
	}
	var env struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: %d, not JSON: %.200s", path, code, body)
	}
	if code != http.StatusOK || env.Status != "success" {
		return fmt.Errorf("GET %s: %d %s: %s", path, code, env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// QueryRange runs a range query (what Grafana sends for a time series panel).
func (s *Server) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (Result, error) {
	var r Result
	err := s.get(ctx, "/api/v1/query_range", url.Values{"query": {expr}, "start": {unix(start)}, "end": {unix(end)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}, &r)
	return r, err
}

// Query runs an instant query (what Grafana sends for a target with instant: true).
func (s *Server) Query(ctx context.Context, expr string, at time.Time) (Result, error) {
	var r Result
	err := s.get(ctx, "/api/v1/query", url.Values{"query": {expr}, "time": {unix(at)}}, &r)
	return r, err
}

// LabelValues returns the values of label on the series matching selector (all series
// when empty) between start and end, as Grafana's label_values() does.
func (s *Server) LabelValues(ctx context.Context, selector, label string, start, end time.Time) ([]string, error) {
	params := url.Values{"start": {unix(start)}, "end": {unix(end)}}
	if selector != "" {
		params.Set("match[]", selector)
	}
	var vals []string
	err := s.get(ctx, "/api/v1/label/"+label+"/values", params, &vals)
	return vals, err
}

func unix(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', 3, 64)
}

// Counts returns how many series a result has and how many of them have a sample that
// is a number (not NaN): histogram_quantile over an empty window gives NaN.
func (r Result) Counts() (series, withNumbers int) {
	isNum := func(pair []any) bool {
		if len(pair) != 2 {
			return false
		}
		s, _ := pair[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		return err == nil && !math.IsNaN(f)
	}
	for _, s := range r.Result {
		series++
		ok := isNum(s.Value)
		for _, v := range s.Values {
			ok = ok || isNum(v)
		}
		if ok {
			withNumbers++
		}
	}
	return series, withNumbers
}

// Scalar runs an instant query now whose answer is one number.
func (s *Server) Scalar(ctx context.Context, expr string) (float64, error) {
	r, err := s.Query(ctx, expr, time.Now())
	if err != nil {
		return 0, err
	}
	if len(r.Result) == 0 || len(r.Result[0].Value) != 2 {
		return 0, fmt.Errorf("%s: no result", expr)
	}
	str, _ := r.Result[0].Value[1].(string)
	return strconv.ParseFloat(str, 64)
}
