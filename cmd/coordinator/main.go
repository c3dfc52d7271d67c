// Command coordinator runs a kshard coordinator replica: one replica leads (through a
// Lease), tracks shard membership, assigns namespace partitions to shards and drives every
// handoff over gRPC. `coordinator assignments` prints who owns what.
package main

import (
	"os"

	"github.com/kshard/kshard/cmd/coordinator/app"
)

func main() { os.Exit(app.Main(os.Args[1:])) }
