package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
)

// assignmentsMain prints GET /assignments of a coordinator for a person.
func assignmentsMain(args []string) int {
	fs := pflag.NewFlagSet("coordinator assignments", pflag.ContinueOnError)
	addr := fs.String("server", "http://127.0.0.1:8080", "base URL of the coordinator leader's HTTP port")
	ns := fs.String("namespace", "", "print only the shard that owns this namespace")
	asJSON := fs.Bool("json", false, "print the raw JSON answer")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	u, err := url.Parse(*addr)
	if err != nil || u.Scheme == "" || u.Host == "" {
		fmt.Fprintf(os.Stderr, "--server=%q: want a URL such as http://127.0.0.1:8080\n", *addr)
		return 2
	}
	u.Path = "/assignments"
	if *ns != "" {
		u.RawQuery = url.Values{"namespace": {*ns}}.Encode()
	}
	body, err := get(u.String())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if *asJSON {
		os.Stdout.Write(body)
		return 0
	}
	if *ns != "" {
		var o coordinatorrpc.Owner
		if err := json.Unmarshal(body, &o); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		owner := o.Shard
		if owner == "" {
			owner = "(nobody yet)"
		}
		fmt.Printf("namespace %s is in partition %d, owned by %s (%s, epoch %s)\n", o.Namespace, o.Partition, owner, o.State, o.Epoch)
		return 0
	}
	var a coordinatorrpc.Assignments
	if err := json.Unmarshal(body, &a); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("term %d, %d partitions, converged=%v, moves in flight %d, by state %v\n",
		a.Term, a.PartitionCount, a.Converged, a.MovesInFlight, a.ByState)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SHARD\tPARTITIONS\tNAMESPACES\tCACHED OBJECTS\tQUEUE DEPTH\tCONNECTED\tLEAVING\tFENCED")
	for _, s := range a.Shards {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%v\t%v\t%v\n", s.Shard, s.Partitions, s.Namespaces, s.CachedObjects, s.QueueDepth, s.Connected, s.Leaving, s.Fenced)
	}
	_ = w.Flush()
	return 0
}

// maxAnswerBytes bounds what get reads. The largest real answer, every partition ID of
// partition.MaxCount listed, is well under 1 MiB; anything far beyond is not a coordinator.
const maxAnswerBytes = 16 << 20

func get(u string) ([]byte, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxAnswerBytes {
		return nil, fmt.Errorf("GET %s: answer larger than %d bytes", u, maxAnswerBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, body)
	}
	return body, nil
}
