package kubestore

import (
	"context"
	"fmt"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// leaseScheme is the scheme of the Store's client: coordination.k8s.io/v1
// alone (Lease, LeaseList and the meta types of their requests and
// watches), not the types of every API group that client-go's clientset
// links. Built once, on the first New.
var leaseScheme = sync.OnceValues(func() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	return s, coordinationv1.AddToScheme(s)
})

// newLeaseClient returns a client of the Leases in namespace on cfg's
// server (not nil), with cfg's credentials, TLS, timeout and rate limit.
// cfg is not modified.
func newLeaseClient(cfg *rest.Config, namespace string) (leaseClient, error) {
	scheme, err := leaseScheme()
	if err != nil {
		return leaseClient{}, fmt.Errorf("kubestore: %w", err)
	}
	c := rest.CopyConfig(cfg)
	gv := coordinationv1.SchemeGroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		// client-go's messages name the host and the fields at fault, never
		// the credentials.
		return leaseClient{}, fmt.Errorf("kubestore: %w", err)
	}
	return leaseClient{rc: rc, namespace: namespace, params: runtime.NewParameterCodec(scheme)}, nil
}

// leaseClient makes the requests the Store sends on the Leases of one
// namespace, with the methods (and wire format: protobuf unless the
// rest.Config names a content type) of client-go's typed Lease client.
type leaseClient struct {
	rc        rest.Interface
	namespace string
	params    runtime.ParameterCodec
}

// request starts a request on the namespace's leases.
func (c leaseClient) request(verb string) *rest.Request {
	return c.rc.Verb(verb).UseProtobufAsDefault().Namespace(c.namespace).Resource("leases")
}

func (c leaseClient) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := c.request("GET").Name(name).VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}

func (c leaseClient) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := c.request("POST").VersionedParams(&opts, c.params).Body(lease).Do(ctx).Into(out)
	return out, err
}

func (c leaseClient) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := c.request("PUT").Name(lease.Name).VersionedParams(&opts, c.params).Body(lease).Do(ctx).Into(out)
	return out, err
}

func (c leaseClient) List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	out := &coordinationv1.LeaseList{}
	err := c.request("GET").VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}

func (c leaseClient) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.request("GET").VersionedParams(&opts, c.params).Watch(ctx)
}
