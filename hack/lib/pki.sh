# shellcheck shell=bash
# Certificates and kubeconfigs of the local control plane, shared by hack/cluster.sh (the
# control plane's own) and hack/node.sh (the node's components'). Needs openssl.

# pki_signed CA OUT CN ORG [SANs]: a key OUT.key and a certificate OUT.crt for CN (and the
# organisation ORG, the user's group, when not empty) signed by CA.crt/CA.key: a client
# certificate, or with SANs a serving and client one. An existing OUT.crt is kept.
pki_signed() {
  local ca=$1 out=$2 cn=$3 org=$4 sans=${5:-}
  [ -f "$out.crt" ] && return 0
  local subj="/CN=$cn"
  [ -n "$org" ] && subj="/O=$org$subj"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "$sans" ]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$sans"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$out.ext"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$out.key" -subj "$subj" -out "$out.csr" 2>/dev/null
  openssl x509 -req -in "$out.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$out.ext" -out "$out.crt" 2>/dev/null
  rm -f "$out.csr" "$out.ext"
}

# pki_kubeconfig FILE SERVER CA_CRT USER CERT: a kubeconfig for SERVER, trusting CA_CRT,
# that authenticates as USER with CERT.crt and CERT.key.
pki_kubeconfig() {
  local file=$1 server=$2 ca_crt=$3 user=$4 cert=$5
  cat >"$file" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: kshard-local
  cluster:
    server: $server
    certificate-authority: $ca_crt
users:
- name: $user
  user:
    client-certificate: $cert.crt
    client-key: $cert.key
contexts:
- name: kshard-local
  context:
    cluster: kshard-local
    user: $user
current-context: kshard-local
KUBECONFIG
}
