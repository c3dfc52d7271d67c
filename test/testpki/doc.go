// Package testpki makes throwaway certificate authorities for tests of kshard's mutual
// TLS. It is apart from test/framework so that unit tests of the packages the framework
// builds on (transport, the gRPC edges) can use it without an import cycle.
package testpki
