// Command content-provider is an example BundleContentProvider: the service
// a domain runs so that the hub can hand market actors whole documents. It
// renders a bundle as a JSON or XML document listing its notifications; a
// real domain would look up the data each notification announced.
//
//	go run ./examples/content-provider --addr 127.0.0.1:50061 --format xml
//	go run ./cmd/messagehub --content-provider DOMAIN_TIME_SERIES=127.0.0.1:50061
package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:50061", "listen address")
	format := flag.String("format", "json", "document format: json or xml")
	flag.Parse()
	if *format != "json" && *format != "xml" {
		fmt.Fprintln(os.Stderr, "--format must be json or xml")
		os.Exit(2)
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := newServer(*format, slog.Default())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	slog.Info("content provider listening", "addr", lis.Addr().String(), "format", *format)
	if err := srv.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// newServer is the provider's gRPC server, rendering documents in format.
func newServer(format string, log *slog.Logger) *grpc.Server {
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxRequestBytes))
	messagehubv1.RegisterBundleContentProviderServer(srv, &provider{format: format, log: log})
	return srv
}

// maxRequestBytes is the largest request the provider takes: the hub sends
// the whole bundle, about 59 MB at the largest (see provider.proto), over
// the 4 MiB a gRPC server takes by default.
const maxRequestBytes = 64 << 20

// chunkSize keeps each streamed message well inside gRPC's default limits.
const chunkSize = 64 << 10

type provider struct {
	messagehubv1.UnimplementedBundleContentProviderServer
	format string
	log    *slog.Logger
}

// document is what the example renders for a bundle. It leaves out the
// bundle's document types, which the actor gets with the bundle: the
// largest bundle (200,000 notifications, each with a document type of its
// own of 255 characters) would make it over the 50 MiB the hub stores,
// and the hub would ask again and never serve it.
type document struct {
	XMLName       xml.Name `json:"-" xml:"Document"`
	BundleID      string   `json:"bundleId" xml:"BundleId"`
	Recipient     string   `json:"recipient" xml:"Recipient"`
	Origin        string   `json:"origin" xml:"Origin"`
	ContentType   string   `json:"contentType" xml:"ContentType"`
	Notifications []string `json:"notifications" xml:"Notifications>Id"`
}

// CreateBundleContent renders the bundle and streams it, the media type in
// the first chunk.
func (p *provider) CreateBundleContent(req *messagehubv1.CreateBundleContentRequest, stream grpc.ServerStreamingServer[messagehubv1.BundleContentChunk]) error {
	b := req.GetBundle()
	doc := document{
		BundleID: b.GetId(), Recipient: b.GetRecipient(), Origin: b.GetOrigin().String(),
		ContentType: b.GetContentType(), Notifications: b.GetNotificationIds(),
	}
	data, mediaType, err := render(doc, p.format)
	if err != nil {
		return err
	}
	p.log.Info("document built", "bundle", b.GetId(), "bytes", len(data))
	first := &messagehubv1.BundleContentChunk{MediaType: mediaType}
	for chunk := first; ; chunk = new(messagehubv1.BundleContentChunk) {
		n := min(chunkSize, len(data))
		chunk.Data, data = data[:n], data[n:]
		if err := stream.Send(chunk); err != nil {
			return err
		}
		if len(data) == 0 {
			return nil
		}
	}
}

// BundleDequeued is where a domain cleans up; the hub may tell it more than
// once, so it must be harmless to repeat.
func (p *provider) BundleDequeued(_ context.Context, req *messagehubv1.BundleDequeuedRequest) (*messagehubv1.BundleDequeuedResponse, error) {
	p.log.Info("bundle dequeued", "bundle", req.GetBundle().GetId())
	return &messagehubv1.BundleDequeuedResponse{}, nil
}

func render(doc document, format string) ([]byte, string, error) {
	if format == "xml" {
		data, err := xml.MarshalIndent(doc, "", "  ")
		return append([]byte(xml.Header), data...), "application/xml; charset=utf-8", err
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	return data, "application/json", err
}
