package framework

// Accessors the chaos test (test/chaos) needs beyond what kshard.go exports: its
// adversary dials the coordinators with the KShard's own client certificate, and its
// Lease fault deletes the KShard's election Lease.

// PKI returns the certificates of this KShard's mutual TLS (the CA, the coordinators'
// serving certificate and the client certificate every shard holds).
func (k *KShard) PKI() PKI { return k.pki }

// LeaseName is the name of the coordinators' leader election Lease (in kube-system).
func (k *KShard) LeaseName() string { return k.leaseName }
