package kubetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// NodePort plays kube-proxy for one NodePort Service: a TCP forwarder on
// IP:NodePort (a loopback IP standing for a worker node) that forwards
// each connection to a ready pod the Service selects, at the pod's status
// IP and its container port named "client" (etcd-operator's member pods;
// no kubelet runs, AddEtcdCluster's pods carry the member's real port).
// The Service and its pods are looked up from the API for each
// connection, so a restored cluster's new pods are reached through the
// same address. While the Service does not exist (checked every 100 ms)
// nothing listens: connections are refused, as on a node whose kube-proxy
// has no rule for the port.
type NodePort struct {
	Namespace, Service string
	IP                 string
	Port               int32

	cs kubernetes.Interface

	mu    sync.Mutex
	ln    net.Listener
	conns int
}

// Addr is IP:Port, the address a customer master is given.
func (n *NodePort) Addr() string { return net.JoinHostPort(n.IP, strconv.Itoa(int(n.Port))) }

// Conns is how many connections were forwarded so far.
func (n *NodePort) Conns() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.conns
}

// StartNodePort starts the forwarder of the NodePort Service service in
// namespace on ip (a 127.0.0.0/8 address no other test uses), at the
// Service's nodePort (read now: the Service must exist; its port named
// "client", else its only port). It stops when the test ends.
func StartNodePort(tb testing.TB, cs kubernetes.Interface, namespace, service, ip string) *NodePort {
	tb.Helper()
	svc, err := cs.CoreV1().Services(namespace).Get(context.Background(), service, metav1.GetOptions{})
	if err != nil {
		tb.Fatalf("kubetest: NodePort %s/%s: %v", namespace, service, err)
	}
	sp, err := nodePortOf(svc)
	if err != nil {
		tb.Fatalf("kubetest: %v", err)
	}
	n := &NodePort{Namespace: namespace, Service: service, IP: ip, Port: sp.NodePort, cs: cs}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	tb.Cleanup(func() {
		cancel()
		<-done
		n.mu.Lock()
		if n.ln != nil {
			n.ln.Close()
		}
		n.mu.Unlock()
	})
	if err := n.sync(ctx); err != nil {
		tb.Fatalf("kubetest: NodePort %s: %v", n.Addr(), err)
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			if err := n.sync(ctx); err != nil && ctx.Err() == nil {
				tb.Logf("kubetest: NodePort %s: %v", n.Addr(), err)
			}
		}
	}()
	return n
}

// nodePortOf is the Service's port with a nodePort: the one named
// "client", else the only one.
func nodePortOf(svc *corev1.Service) (corev1.ServicePort, error) {
	if svc.Spec.Type != corev1.ServiceTypeNodePort {
		return corev1.ServicePort{}, fmt.Errorf("service %s/%s is of type %q, not NodePort", svc.Namespace, svc.Name, svc.Spec.Type)
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == "client" && p.NodePort != 0 {
			return p, nil
		}
	}
	if len(svc.Spec.Ports) == 1 && svc.Spec.Ports[0].NodePort != 0 {
		return svc.Spec.Ports[0], nil
	}
	return corev1.ServicePort{}, fmt.Errorf("service %s/%s has no port with a nodePort", svc.Namespace, svc.Name)
}

// sync listens while the Service exists with the nodePort, and closes the
// listener while it does not.
func (n *NodePort) sync(ctx context.Context) error {
	svc, err := n.cs.CoreV1().Services(n.Namespace).Get(ctx, n.Service, metav1.GetOptions{})
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return nil // the API server may blip: keep the current state
	}
	if exists {
		if p, err := nodePortOf(svc); err != nil || p.NodePort != n.Port {
			exists = false
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case exists && n.ln == nil:
		ln, err := net.Listen("tcp", n.Addr())
		if err != nil {
			return err
		}
		n.ln = ln
		go n.serve(ctx, ln)
	case !exists && n.ln != nil:
		n.ln.Close()
		n.ln = nil
	}
	return nil
}

func (n *NodePort) serve(ctx context.Context, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go n.forward(ctx, c)
	}
}

// forward connects c to a ready pod of the Service, found now.
func (n *NodePort) forward(ctx context.Context, c net.Conn) {
	defer c.Close()
	target, err := n.endpoint(ctx)
	if err != nil {
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	up, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	n.mu.Lock()
	n.conns++
	n.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	go pipe(up, c)
	go pipe(c, up)
	wg.Wait()
}

// endpoint is the status IP and "client" port of the first running pod
// the Service selects (by name order).
func (n *NodePort) endpoint(ctx context.Context) (string, error) {
	svc, err := n.cs.CoreV1().Services(n.Namespace).Get(ctx, n.Service, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if len(svc.Spec.Selector) == 0 {
		return "", errors.New("service without a selector")
	}
	pods, err := n.cs.CoreV1().Pods(n.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		for _, ct := range p.Spec.Containers {
			for _, cp := range ct.Ports {
				if cp.Name == "client" {
					return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(cp.ContainerPort))), nil
				}
			}
		}
	}
	return "", fmt.Errorf("no running pod of service %s/%s", n.Namespace, n.Service)
}
