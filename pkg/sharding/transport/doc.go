// Package transport holds the gRPC settings the coordinator and the shards must agree on:
// mutual TLS from certificate files (a server with TLS always requires and verifies client
// certificates, so that only holders of a shard certificate reach the session service at
// all; plaintext only when explicitly asked for), and keepalive parameters chosen so that
// the client never pings more often than the server's enforcement policy allows (which
// would make the server close the connection with ENHANCE_YOUR_CALM).
package transport
