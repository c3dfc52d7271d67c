package framework

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// Sample is one series of a scrape.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Samples is a parsed /metrics page (Prometheus text format).
type Samples []Sample

var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// Scrape reads and parses baseURL/metrics.
func Scrape(ctx context.Context, baseURL string) (Samples, error) {
	code, body, err := HTTPGet(ctx, baseURL+"/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %d", baseURL, code)
	}
	return ParseMetrics(string(body)), nil
}

// ParseMetrics parses the Prometheus text format; comments and malformed lines are skipped.
func ParseMetrics(text string) Samples {
	var out Samples
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s := Sample{Labels: map[string]string{}}
		rest := line
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			s.Name = line[:i]
			for _, m := range labelRE.FindAllStringSubmatch(line[i+1:j], -1) {
				s.Labels[m[1]] = m[2]
			}
			rest = line[j+1:]
		} else {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			s.Name, rest = f[0], strings.Join(f[1:], " ")
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		s.Value = v
		out = append(out, s)
	}
	return out
}

// Value sums the samples named name whose labels match every k="v" of match.
func (m Samples) Value(name string, match ...string) float64 {
	sum := 0.0
	for _, s := range m {
		if s.Name != name {
			continue
		}
		ok := true
		for _, kv := range match {
			k, v, _ := strings.Cut(kv, "=")
			ok = ok && s.Labels[k] == strings.Trim(v, `"`)
		}
		if ok {
			sum += s.Value
		}
	}
	return sum
}
