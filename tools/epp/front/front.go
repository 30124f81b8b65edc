// Package front runs the prompt-length classifier inside the picker's own process, in front of it: the gateway
// calls one ext_proc server (the picker's Service), so a request that names no objective gets its class without
// a second ext_proc filter in the user's gateway.
//
// The upstream picker reads a request's objective from its headers before any of its plugins runs, so no picker
// plugin can set it. The front therefore takes the picker's public gRPC port, holds each request's headers until
// its body is complete, lets the classifier (classify/) set the objective header (and the engine's priority
// field), and relays the stream to the picker listening on a loopback port; every other message passes as is.
package front

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/controller-runtime/pkg/log"

	bbr "sigs.k8s.io/gateway-api-inference-extension/pkg/bbr/framework"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"ascend-fleet.dev/epp/classify"
)

// Classifier is what the front asks of a request: the classify plugin's ProcessRequest.
type Classifier interface {
	ProcessRequest(ctx context.Context, state *bbr.CycleState, request *bbr.InferenceRequest) error
}

// Flag turns the front on (see Args); PortFlag names the picker's loopback port behind it.
const (
	Flag     = "--classify-requests"
	PortFlag = "--classify-picker-port"
	// DefaultPickerPort is the picker's own port behind the front when PortFlag is not given.
	DefaultPickerPort = 9012
)

var (
	enabled atomic.Bool
	current atomic.Pointer[Classifier]
)

// Enable records that this process runs the front (the picker's configuration may then name the classifier).
func Enable() { enabled.Store(true) }

// Enabled says whether this process runs the front.
func Enabled() bool { return enabled.Load() }

// Use installs the classifier the picker's configuration built; until then requests pass unclassified.
func Use(c Classifier) { current.Store(&c) }

func classifierInUse() Classifier {
	if c := current.Load(); c != nil {
		return *c
	}
	return nil
}

// Server relays Envoy's ext_proc streams to the picker.
type Server struct {
	extProcPb.UnimplementedExternalProcessorServer
	picker extProcPb.ExternalProcessorClient
}

// Serve listens on port (TLS with a self-signed certificate when secure, as the picker itself serves) and relays
// every stream to the picker's plain gRPC on 127.0.0.1:pickerPort, until ctx ends.
func Serve(ctx context.Context, port, pickerPort int, secure bool) error {
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", pickerPort),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	var options []grpc.ServerOption
	if secure {
		cert, err := selfSigned()
		if err != nil {
			return err
		}
		options = append(options, grpc.Creds(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"},
		})))
	}
	server := grpc.NewServer(options...)
	extProcPb.RegisterExternalProcessorServer(server, &Server{picker: extProcPb.NewExternalProcessorClient(conn)})
	listener, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		server.GracefulStop()
	}()
	return server.Serve(listener)
}

// Process relays one request's stream both ways.
func (s *Server) Process(down extProcPb.ExternalProcessor_ProcessServer) error {
	ctx, cancel := context.WithCancel(down.Context())
	defer cancel()
	up, err := s.picker.Process(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "the picker behind the classifier: %v", err)
	}
	requests, responses := make(chan error, 1), make(chan error, 1)
	go func() { requests <- relayRequests(ctx, down, up) }()
	go func() { responses <- relayResponses(up, down) }()
	select {
	case err := <-responses:
		return err
	case err := <-requests:
		if err != nil {
			return err
		}
		return <-responses
	}
}

func relayResponses(up extProcPb.ExternalProcessor_ProcessClient, down extProcPb.ExternalProcessor_ProcessServer) error {
	for {
		message, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := down.Send(message); err != nil {
			return err
		}
	}
}

// relayRequests forwards Envoy's messages; a request with a body has its headers held until the body is whole.
func relayRequests(ctx context.Context, down extProcPb.ExternalProcessor_ProcessServer, up extProcPb.ExternalProcessor_ProcessClient) error {
	var held *extProcPb.ProcessingRequest
	var body []byte
	for {
		message, err := down.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return up.CloseSend()
		}
		if err != nil {
			return err
		}
		c := classifierInUse()
		switch request := message.Request.(type) {
		case *extProcPb.ProcessingRequest_RequestHeaders:
			if c != nil && !request.RequestHeaders.GetEndOfStream() {
				held, body = message, nil
				continue
			}
		case *extProcPb.ProcessingRequest_RequestBody:
			if held != nil {
				body = append(body, request.RequestBody.GetBody()...)
				if !request.RequestBody.GetEndOfStream() {
					continue
				}
				headers, whole := Classify(ctx, c, held, message, body)
				held, body = nil, nil
				if err := sendAll(up, headers, Chunks(whole, ChunkSize)...); err != nil {
					return err
				}
				continue
			}
		case *extProcPb.ProcessingRequest_RequestTrailers:
			if held != nil { // a body that ended without end-of-stream: classify what came
				headers, whole := Classify(ctx, c, held, nil, body)
				held, body = nil, nil
				if err := sendAll(up, headers, Chunks(whole, ChunkSize)...); err != nil {
					return err
				}
			}
		}
		if err := up.Send(message); err != nil {
			return err
		}
	}
}

// Classify runs the classifier on a request's headers and whole body: the headers message with the headers it
// set added, and one body message (last's metadata, the body as the classifier left it, end of stream).
func Classify(ctx context.Context, c Classifier, headers, last *extProcPb.ProcessingRequest, body []byte) (*extProcPb.ProcessingRequest, *extProcPb.ProcessingRequest) {
	outHeaders := proto.Clone(headers).(*extProcPb.ProcessingRequest)
	whole := &extProcPb.ProcessingRequest{}
	if last != nil {
		whole = proto.Clone(last).(*extProcPb.ProcessingRequest)
	}
	request := bbr.NewInferenceRequest()
	headerMap := outHeaders.GetRequestHeaders().GetHeaders()
	for _, h := range headerMap.GetHeaders() {
		request.Headers[strings.ToLower(h.GetKey())] = headerValue(h)
	}
	if err := json.Unmarshal(body, &request.Body); err == nil {
		if err := c.ProcessRequest(ctx, nil, request); err != nil {
			log.FromContext(ctx).Error(err, "classifying a request")
		}
	} // a body that is not JSON goes on as it came: the picker answers it
	for key, value := range request.MutatedHeaders() {
		headerMap.Headers = append(headerMap.Headers, &corev3.HeaderValue{Key: key, RawValue: []byte(value)})
	}
	if request.BodyMutated() {
		if mutated, err := json.Marshal(request.Body); err == nil {
			body = mutated
		}
	}
	whole.Request = &extProcPb.ProcessingRequest_RequestBody{
		RequestBody: &extProcPb.HttpBody{Body: body, EndOfStream: true},
	}
	return outHeaders, whole
}

// ChunkSize is the largest body piece the front sends the picker in one message: gRPC servers refuse messages
// over 4 MiB by default, and a request body (images in base64) can be larger.
const ChunkSize = 64 * 1024

// Chunks splits a body message into messages of at most size bytes of body each, the last one ending the stream.
func Chunks(whole *extProcPb.ProcessingRequest, size int) []*extProcPb.ProcessingRequest {
	body := whole.GetRequestBody().GetBody()
	var out []*extProcPb.ProcessingRequest
	for start := 0; start == 0 || start < len(body); start += size {
		end := min(start+size, len(body))
		piece := proto.Clone(whole).(*extProcPb.ProcessingRequest)
		piece.Request = &extProcPb.ProcessingRequest_RequestBody{
			RequestBody: &extProcPb.HttpBody{Body: body[start:end], EndOfStream: end == len(body)},
		}
		out = append(out, piece)
	}
	return out
}

func sendAll(up extProcPb.ExternalProcessor_ProcessClient, first *extProcPb.ProcessingRequest, rest ...*extProcPb.ProcessingRequest) error {
	for _, message := range append([]*extProcPb.ProcessingRequest{first}, rest...) {
		if err := up.Send(message); err != nil {
			return err
		}
	}
	return nil
}

func headerValue(h *corev3.HeaderValue) string {
	if raw := h.GetRawValue(); len(raw) > 0 {
		return string(raw)
	}
	return h.GetValue()
}

// selfSigned is a certificate for the front's TLS, made in memory as the picker makes its own: Envoy does not
// verify the picker's certificate (the InferencePool's picker is reached inside the cluster).
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"ascend-fleet endpoint picker"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// PluginFactory builds the classifier from the picker's configuration (plugin type classify.PluginType) and puts
// it in front of the picker. It refuses where this process runs no front: the classes would silently not apply.
func PluginFactory(name string, raw json.RawMessage, handle plugin.Handle) (plugin.Plugin, error) {
	if !Enabled() {
		return nil, fmt.Errorf("%s classifies requests in front of the picker: start the picker with %s", classify.PluginType, Flag)
	}
	built, err := classify.Factory(name, raw, nil)
	if err != nil {
		return nil, err
	}
	classifier := built.(*classify.Plugin)
	Use(classifier)
	return classifier, nil
}
