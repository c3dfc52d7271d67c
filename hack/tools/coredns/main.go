// Command coredns is CoreDNS with only the plugins the local cluster's real node needs
// (hack/node.sh): cluster DNS from the kubernetes plugin, health and readiness, a cache.
// No forward plugin: nothing the node's pods ask is ever sent outside the machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives are the plugins above in CoreDNS's own order (its plugin.cfg): a server
// block's plugins run in this order whatever order the Corefile lists them in.
var directives = []string{"reload", "ready", "health", "errors", "log", "loadbalance", "cache", "kubernetes"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
