package podcache

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// Writer sends the two writes a pod costs, its create and its
// finalizer patch, straight through a core/v1 REST client in protobuf. The
// API server answers each with the pod; a client.Client would read that
// answer whole and decode it into a Pod. A patch's answer nothing reads
// (the pod informer shows the pod as it is): it asks for the metadata only
// (a far shorter answer than the whole pod), and reads it through a shared
// buffer without keeping or decoding it. A create's answer is the pod as
// admission left it, which the operator compares with what it asked for:
// its metadata, or the whole pod where the operator relies on the spec.
// An error answer is decoded as usual, so apierrors still tell an
// AlreadyExists or a NotFound.
type Writer struct {
	rest rest.Interface
}

// metadataOnly asks the API server to answer a write with the object's
// metadata, as client-go's metadata client does.
const metadataOnly = runtime.ContentTypeProtobuf + ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1," +
	runtime.ContentTypeJSON + ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

// NewWriter makes a Writer on cfg, whose rate limiter it shares.
func NewWriter(cfg *rest.Config) (*Writer, error) {
	c, err := coreV1ProtobufClient(cfg, clientgoscheme.Codecs.WithoutConversion())
	if err != nil {
		return nil, err
	}
	return &Writer{rest: c}, nil
}

// coreV1ProtobufClient is a REST client for core/v1 on a copy of cfg
// (whose rate limiter and transport it shares) that speaks protobuf and
// decodes with codecs: the pod informer's (wireCodecs) and the Writer's.
func coreV1ProtobufClient(cfg *rest.Config, codecs runtime.NegotiatedSerializer) (*rest.RESTClient, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.APIPath = "/api"
	cfg.NegotiatedSerializer = codecs
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(cfg)
}

// Create creates the pod and returns it as the API server created it,
// after admission: its metadata, and with withSpec its spec too (the
// answer is then the whole pod, decoded whole). The operator compares it
// with what it asked for (podbuild.Mutations).
func (w *Writer) Create(ctx context.Context, pod *corev1.Pod, withSpec bool) (*corev1.Pod, error) {
	accept := metadataOnly
	if withSpec {
		accept = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	// Stream, not Do: Do decodes a refusal's Status with the client's
	// serializer, which reads no Status answered to this Accept, and the
	// API server's reason and message would be lost ("unknown").
	answer, err := w.rest.Post().Namespace(pod.Namespace).Resource("pods").Body(pod).SetHeader("Accept", accept).Stream(ctx)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(answer)
	if cerr := answer.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("reading the answer to the create of pod %s: %w", pod.Name, err)
	}
	obj, _, err := answerDecoder.Decode(body, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("reading the answer to the create of pod %s: %w", pod.Name, err)
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		return o, nil
	case *metav1.PartialObjectMetadata:
		return &corev1.Pod{ObjectMeta: o.ObjectMeta}, nil
	}
	return nil, fmt.Errorf("the answer to the create of pod %s is a %T", pod.Name, obj)
}

// answerDecoder decodes a create's answer: a Pod, or its
// PartialObjectMetadata (metadataOnly), in protobuf or JSON.
var answerDecoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(metav1.AddMetaToScheme(s))
	return serializer.NewCodecFactory(s).UniversalDeserializer()
}()

// Patch applies a strategic merge patch to the named pod.
func (w *Writer) Patch(ctx context.Context, namespace, name string, patch []byte) error {
	return send(ctx, w.rest.Patch(types.StrategicMergePatchType).Namespace(namespace).Resource("pods").Name(name).Body(patch))
}

// send sends a write that asks for the metadata in answer, and reads a
// success's answer into io.Discard, whose buffers are pooled, rather than
// into a new slice as Do does; a failure's is decoded into the error.
func send(ctx context.Context, req *rest.Request) error {
	answer, err := req.SetHeader("Accept", metadataOnly).Stream(ctx)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, answer)
	if cerr := answer.Close(); err == nil {
		err = cerr
	}
	return err
}
