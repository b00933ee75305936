package main

import (
	"context"
	"log"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// hostIP is every process node's address: the kubelet API listens there.
const hostIP = "127.0.0.1"

// shared is what all nodes of one procnode process share: the pod network, and a
// counter for unique veth names.
type shared struct {
	cfg    *Config
	client kubernetes.Interface
	net    *network
	veths  atomic.Uint32
}

// provider is the virtual-kubelet provider of one node: pods run as processes.
type provider struct {
	*shared
	nodeName string

	mu       sync.Mutex
	pods     map[string]*podRuntime // namespace/name
	notifyFn func(*corev1.Pod)
	ready    chan struct{} // closed once NotifyPods has been called
	closing  atomic.Bool   // procnode is stopping: no more status updates
}

func newProvider(s *shared, nodeName string) *provider {
	return &provider{shared: s, nodeName: nodeName, pods: map[string]*podRuntime{}, ready: make(chan struct{})}
}

func (s *shared) nextVeth() uint32 { return s.veths.Add(1) }

func (pr *provider) lookup(namespace, name string) *podRuntime {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.pods[namespace+"/"+name]
}

// NotifyPods is how status reaches the API server: every change is pushed.
func (pr *provider) NotifyPods(_ context.Context, fn func(*corev1.Pod)) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.notifyFn = fn
	close(pr.ready)
}

func (pr *provider) notify(pod *corev1.Pod) {
	if pr.closing.Load() {
		return
	}
	<-pr.ready
	pr.mu.Lock()
	fn := pr.notifyFn
	pr.mu.Unlock()
	fn(pod)
}

func (pr *provider) CreatePod(_ context.Context, pod *corev1.Pod) error {
	pr.mu.Lock()
	key := pod.Namespace + "/" + pod.Name
	if old, ok := pr.pods[key]; ok && old.pod.UID == pod.UID {
		pr.mu.Unlock()
		return nil
	}
	p := newPodRuntime(pr, pod)
	pr.pods[key] = p
	pr.mu.Unlock()
	go p.run()
	return nil
}

// UpdatePod: a running pod's spec is immutable but for labels, annotations and
// images (which are never pulled here anyway).
func (pr *provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	if p := pr.lookup(pod.Namespace, pod.Name); p != nil {
		p.mu.Lock()
		p.pod.Labels, p.pod.Annotations = pod.Labels, pod.Annotations
		p.mu.Unlock()
	}
	return nil
}

// DeletePod stops the pod within its grace period, in the background; its final
// status (every container terminated) is then pushed, and virtual-kubelet removes
// the object.
func (pr *provider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	p := pr.lookup(pod.Namespace, pod.Name)
	if p == nil || p.pod.UID != pod.UID {
		return errdefs.NotFoundf("pod %s/%s is not on node %s", pod.Namespace, pod.Name, pr.nodeName)
	}
	grace := 30 * time.Second
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	} else if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	go func() {
		began := time.Now()
		p.terminate(grace)
		log.Printf("%s: stopped in %.1fs", p.key(), time.Since(began).Seconds())
		pr.mu.Lock()
		if pr.pods[p.key()] == p {
			delete(pr.pods, p.key())
		}
		pr.mu.Unlock()
		// As the kubelet does once a deleted pod's containers are gone: remove the
		// object now rather than at the end of its grace period.
		zero := int64(0)
		err := pr.client.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.Printf("%s: deleting: %v", p.key(), err)
		}
	}()
	return nil
}

func (pr *provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p := pr.lookup(namespace, name)
	if p == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on node %s", namespace, name, pr.nodeName)
	}
	return p.snapshot(), nil
}

func (pr *provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := pr.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

func (pr *provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	pr.mu.Lock()
	runtimes := make([]*podRuntime, 0, len(pr.pods))
	for _, p := range pr.pods {
		runtimes = append(runtimes, p)
	}
	pr.mu.Unlock()
	pods := make([]*corev1.Pod, 0, len(runtimes))
	for _, p := range runtimes {
		pods = append(pods, p.snapshot())
	}
	return pods, nil
}

func (pr *provider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return nil, errdefs.InvalidInput("stats are not collected on process nodes")
}

func (pr *provider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, errdefs.InvalidInput("metrics are not collected on process nodes")
}

// shutdown stops every pod at once (procnode is stopping).
func (pr *provider) shutdown(grace time.Duration) {
	pr.mu.Lock()
	runtimes := make([]*podRuntime, 0, len(pr.pods))
	for _, p := range pr.pods {
		runtimes = append(runtimes, p)
	}
	pr.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range runtimes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.terminate(grace)
		}()
	}
	wg.Wait()
}
