// Package deploy owns the tests of airlock's deployment artifacts: the
// container image (deploy/image), the Helm chart and its router
// (deploy/helm/airlock), and the tools they use (deploy/tools, a Go module
// of its own). It has no code for airlock's binary and must never be
// imported by it.
//
// The tests run the real tools: helm lint and template, kubeconform against
// schemas generated offline, nginx and dnsmasq on loopback, and the image
// built by deploy/image/build.sh started with airlock doctor and a session.
// The slow or tool-building ones run only when AIRLOCK_TEST_DEPLOY=1, which
// scripts/test.sh (and so CI) sets; there, whatever is missing is a failure,
// never a skip. Without it they say why they skip.
package deploy
