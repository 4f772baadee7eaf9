// The real node's pod sandbox ("pause") image: registry.k8s.io cannot be reached from here, so the
// test environment builds its own (tests/testenv/node_images.py packs it into an OCI archive).
module a2rl.dev/testenv/pause

go 1.26.0
