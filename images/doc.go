// Package images holds the toolkit image's build file (Dockerfile, built
// by `make image` through scripts/image.sh with buildah, FROM scratch) and
// the tests that run the built image with podman as Kubernetes runs it.
package images
