// Package apiconv converts between the API's generated messages and the
// domain's types, for every package that speaks the API.
package apiconv

import (
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
)

// Notification is a DataAvailable of the API as the domain sees it.
func Notification(n *messagehubv1.DataAvailable) domain.Notification {
	return domain.Notification{
		ID:               n.GetId(),
		Recipient:        n.GetRecipient(),
		Origin:           domain.Origin(n.GetOrigin()),
		ContentType:      n.GetContentType(),
		DocumentType:     n.GetDocumentType(),
		SupportsBundling: n.GetSupportsBundling(),
		Weight:           n.GetWeight(),
	}
}

// Bundle is a bundle as the API sends it; nil stays nil.
func Bundle(b *domain.Bundle) *messagehubv1.Bundle {
	if b == nil {
		return nil
	}
	return &messagehubv1.Bundle{
		Id:              b.ID,
		Recipient:       b.Recipient,
		Origin:          messagehubv1.Domain(b.Origin),
		ContentType:     b.ContentType,
		DocumentTypes:   b.DocumentTypes,
		NotificationIds: b.NotificationIDs,
		Weight:          b.Weight,
	}
}
