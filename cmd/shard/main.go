// Command shard runs one kshard shard: it keeps a session with the coordinator leader,
// caches and reconciles only the namespace partitions it has acquired, and runs the
// controllers.
package main

import (
	"os"

	"github.com/kshard/kshard/cmd/shard/app"
)

func main() { os.Exit(app.Main(os.Args[1:])) }
