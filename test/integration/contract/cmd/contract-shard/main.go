// Command contract-shard is the kshard shard with the test-only kshard-stamp controller
// added, built by the contract test: a shard binary whose extra controller lives in the
// test tree.
package main

import (
	"os"

	"github.com/kshard/kshard/cmd/shard/app"
	"github.com/kshard/kshard/test/integration/contract/stamp"
)

func main() { os.Exit(app.Main(os.Args[1:], stamp.Descriptor())) }
