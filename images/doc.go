// Package images holds the container image definition (Dockerfile) and a
// static test that keeps it in step with the Makefile.
package images
