// Package blobstore keeps bundles' documents in Azure Blob Storage, through
// the official azblob SDK: one block blob per document, named
// <recipient>/<bundle id>, its media type as the blob's Content-Type and the
// identity of the bundle it was built for as its metadata "bundle" (which
// Get Blob returns with the document: no request of its own).
//
// A document is staged as uncommitted blocks and made visible by one Put
// Block List, conditional on no blob of that name existing: a reader sees
// the whole document or none, and a stored document is never replaced (a
// second writer's commit fails and the first document stands). Blocks of a
// document that is never committed are discarded by the service (after a
// week at most) and cost nothing meanwhile but their storage.
package blobstore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/energydatahub/messagehub/internal/content"
)

// Config says where the documents go. Exactly one of ConnectionString
// (account key or SAS; Azurite) and ServiceURL (Azure AD through
// azidentity's default credential chain) is set.
type Config struct {
	ConnectionString string
	ServiceURL       string // e.g. https://account.blob.core.windows.net
	Container        string // default DefaultContainer
	// Provision creates the container when it is missing.
	Provision bool
	// BlockSize is the size of each staged block (default 4 MiB): a 50 MiB
	// document is 13 requests, and no more than one block is held in memory.
	BlockSize int
}

// DefaultContainer is the container used when Config names none.
const DefaultContainer = "messagehub-content"

// Store is a content.Store on Azure Blob Storage.
type Store struct {
	c         *container.Client
	blockSize int
}

var _ content.Store = (*Store)(nil)

// Open returns a Store on cfg's container, creating it when cfg.Provision.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg.Container = cmp.Or(cfg.Container, DefaultContainer)
	cfg.BlockSize = cmp.Or(cfg.BlockSize, 4<<20)
	var c *container.Client
	var err error
	switch {
	case cfg.ConnectionString != "" && cfg.ServiceURL != "":
		return nil, errors.New("blob storage: give a connection string or a service URL, not both")
	case cfg.ConnectionString != "":
		opts := &container.ClientOptions{}
		opts.PerRetryPolicies = []policy.Policy{hideSignature{}}
		c, err = container.NewClientFromConnectionString(cfg.ConnectionString, cfg.Container, opts)
	case cfg.ServiceURL != "":
		cred, cerr := azidentity.NewDefaultAzureCredential(nil)
		if cerr != nil {
			return nil, fmt.Errorf("blob storage: no Azure AD credential: %w", cerr)
		}
		c, err = container.NewClient(fmt.Sprintf("%s/%s", strings.TrimRight(cfg.ServiceURL, "/"), cfg.Container), cred, nil)
	default:
		return nil, errors.New("blob storage: no connection string and no service URL")
	}
	if err != nil {
		return nil, fmt.Errorf("blob storage: %w", err)
	}
	if cfg.Provision {
		if _, err := c.Create(ctx, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
			return nil, fmt.Errorf("blob storage: creating container %s: %w", cfg.Container, err)
		}
	} else if _, err := c.GetProperties(ctx, nil); err != nil {
		return nil, fmt.Errorf("blob storage: container %s: %w", cfg.Container, err)
	}
	return &Store{c: c, blockSize: cfg.BlockSize}, nil
}

// hideSignature takes a SAS's signature out of the error of a request that
// got no answer: Go's url.Error names the request's URL, query and all, and
// the hub logs such errors (a start that fails, a document not built or
// not read), which must not carry the credential. An answer's error
// (azcore.ResponseError) names the URL without its query.
type hideSignature struct{}

func (hideSignature) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && u.Query().Has("sig") {
			q := u.Query()
			q.Set("sig", "REDACTED")
			u.RawQuery = q.Encode()
			ue.URL = u.String()
		}
	}
	return resp, err
}

func name(key content.Key) string { return key.Recipient + "/" + key.BundleID }

// Open streams the document of key, or returns content.ErrNotStored. ctx
// bounds the opening only: the body is read until it is closed, since a
// content peek's deadline is for waiting on a document, not for streaming
// 50 MiB of it.
func (s *Store) Open(ctx context.Context, key content.Key) (*content.Document, error) {
	stream, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	resp, err := s.c.NewBlobClient(name(key)).DownloadStream(stream, nil)
	if !stop() || err != nil {
		cancel()
	}
	if bloberror.HasCode(err, bloberror.BlobNotFound) {
		return nil, content.ErrNotStored
	}
	if err == nil && stream.Err() != nil {
		err = ctx.Err() // the answer came as ctx ended: its body is cut off
	}
	if err != nil {
		return nil, fmt.Errorf("blob storage: reading %s: %w", name(key), err)
	}
	// A broken connection resumes where it stopped, on the same etag; a body
	// closed early (the client left) is not retried.
	body := resp.NewRetryReader(stream, &blob.RetryReaderOptions{EarlyCloseAsError: true})
	doc := &content.Document{Body: closer{ReadCloser: body, cancel: cancel}}
	if resp.ContentType != nil {
		doc.MediaType = *resp.ContentType
	}
	doc.Bundle = bundleOf(resp.Metadata)
	return doc, nil
}

// bundleMetadata is the metadata that names the bundle a document was built
// for (content.Key.Bundle); the service answers its name in any case.
const bundleMetadata = "bundle"

// closer ends the download's context with the body.
type closer struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c closer) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// Create stages a document of key.
func (s *Store) Create(ctx context.Context, key content.Key, mediaType string) (content.Staged, error) {
	if err := content.ValidateMediaType(mediaType); err != nil {
		return nil, err
	}
	var prefix [8]byte
	if _, err := rand.Read(prefix[:]); err != nil {
		return nil, err
	}
	return &staged{
		ctx: ctx, b: s.c.NewBlockBlobClient(name(key)), mediaType: mediaType, bundle: key.Bundle,
		prefix: hex.EncodeToString(prefix[:]), blockSize: s.blockSize,
	}, nil
}

// Delete removes the document of key; a missing one is no error.
func (s *Store) Delete(ctx context.Context, key content.Key) error {
	_, err := s.c.NewBlobClient(name(key)).Delete(ctx, nil)
	if err != nil && !bloberror.HasCode(err, bloberror.BlobNotFound) {
		return fmt.Errorf("blob storage: deleting %s: %w", name(key), err)
	}
	return nil
}

// Version is the blob's etag.
func (s *Store) Version(ctx context.Context, key content.Key) (string, error) {
	version, _, err := s.Stored(ctx, key)
	return version, err
}

// Stored is the blob's etag and its metadata "bundle", from one Get Blob
// Properties.
func (s *Store) Stored(ctx context.Context, key content.Key) (version, bundle string, err error) {
	props, err := s.c.NewBlobClient(name(key)).GetProperties(ctx, nil)
	if bloberror.HasCode(err, bloberror.BlobNotFound) {
		return "", "", content.ErrNotStored
	}
	if err != nil {
		return "", "", fmt.Errorf("blob storage: reading the properties of %s: %w", name(key), err)
	}
	if props.ETag == nil {
		return "", "", fmt.Errorf("blob storage: %s has no etag", name(key))
	}
	return string(*props.ETag), bundleOf(props.Metadata), nil
}

// bundleOf is the metadata "bundle", in whatever case the service answers
// its name.
func bundleOf(metadata map[string]*string) string {
	for k, v := range metadata {
		if strings.EqualFold(k, bundleMetadata) && v != nil {
			return *v
		}
	}
	return ""
}

// DeleteVersion deletes the blob on its etag (If-Match): Blob Storage
// refuses the delete of a blob stored again since.
func (s *Store) DeleteVersion(ctx context.Context, key content.Key, version string) error {
	etag := azcore.ETag(version)
	_, err := s.c.NewBlobClient(name(key)).Delete(ctx, &blob.DeleteOptions{AccessConditions: &blob.AccessConditions{
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag},
	}})
	if err != nil && !bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ConditionNotMet) {
		return fmt.Errorf("blob storage: deleting %s: %w", name(key), err)
	}
	return nil
}

// staged uploads a document block by block.
type staged struct {
	ctx       context.Context
	b         *blockblob.Client
	mediaType string
	bundle    string
	// prefix makes this writer's block ids its own: two writers staging the
	// same blob at once never commit each other's blocks.
	prefix string
	// buf grows as the document comes, up to blockSize, so that a document
	// smaller than a block holds its own size, not a block's.
	buf       []byte
	blockSize int
	blocks    []string
	done      bool
	err       error
}

func (w *staged) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n := len(p)
	for len(p) > 0 {
		take := min(len(p), w.blockSize-len(w.buf))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) == w.blockSize {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// flush stages the buffered bytes as the next block.
func (w *staged) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	// Every block id of a blob has the same length; the index keeps them apart.
	id := base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%s-%06d", w.prefix, len(w.blocks)))
	_, err := w.b.StageBlock(w.ctx, id, streaming.NopCloser(bytes.NewReader(w.buf)), nil)
	if err != nil {
		w.err = fmt.Errorf("blob storage: staging a block: %w", err)
		return w.err
	}
	w.blocks = append(w.blocks, id)
	w.buf = w.buf[:0]
	return nil
}

// Commit makes the document visible, whole, unless one is already stored:
// then that one stands and Commit succeeds, since a bundle has one document.
func (w *staged) Commit() error {
	if w.done {
		return errors.New("document already committed or aborted")
	}
	w.done = true
	if err := w.flush(); err != nil {
		return err
	}
	var metadata map[string]*string
	if w.bundle != "" {
		metadata = map[string]*string{bundleMetadata: &w.bundle}
	}
	_, err := w.b.CommitBlockList(w.ctx, w.blocks, &blockblob.CommitBlockListOptions{
		HTTPHeaders: &blob.HTTPHeaders{BlobContentType: &w.mediaType},
		Metadata:    metadata,
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{
			IfNoneMatch: to.Ptr(azcore.ETagAny),
		}},
	})
	if bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("blob storage: committing a document: %w", err)
	}
	return nil
}

// Abort drops the buffer; staged blocks are left for the service to discard.
func (w *staged) Abort() {
	w.done = true
	w.buf = nil
}
