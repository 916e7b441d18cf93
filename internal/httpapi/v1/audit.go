package v1

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
	"airlock/internal/identity"
)

// AuditLog is the audit log the API serves (package audit).
type AuditLog interface {
	Query(ctx context.Context, q apitype.AuditQuery) ([]apitype.AuditRecord, string, error)
	// Check refuses work while records cannot be written (nil: go on).
	Check() error
	// Health is its state for /healthz.
	Health() apitype.AuditHealth
}

// audit serves GET /v1/audit: tenants read their own records, admins
// everyone's.
func (s *Server) audit(w http.ResponseWriter, r *http.Request) {
	if s.Audit == nil {
		fail(w, fmt.Errorf("%w: the audit log is off (audit.enabled)", errdefs.ErrUnsupported))
		return
	}
	qv := r.URL.Query()
	now := time.Now()
	var q apitype.AuditQuery
	var err error
	if q.Since, err = apitype.ParseAuditTime(qv.Get("since"), now); err != nil {
		fail(w, fmt.Errorf("%w: since: %w", errdefs.ErrInvalidArgument, err))
		return
	}
	if q.Until, err = apitype.ParseAuditTime(qv.Get("until"), now); err != nil {
		fail(w, fmt.Errorf("%w: until: %w", errdefs.ErrInvalidArgument, err))
		return
	}
	q.Session, q.Tenant, q.Kind = qv.Get("session"), qv.Get("tenant"), qv.Get("kind")
	q.Limit = 100
	if v := qv.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > apitype.MaxAuditPage {
			fail(w, fmt.Errorf("%w: limit %q must be between 1 and %d", errdefs.ErrInvalidArgument, httpapi.Truncate(v), apitype.MaxAuditPage))
			return
		}
		q.Limit = n
	}
	if v := qv.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			fail(w, fmt.Errorf("%w: cursor %q is not one this server gave", errdefs.ErrInvalidArgument, httpapi.Truncate(v)))
			return
		}
		q.After = n
	}
	who, _ := identity.From(r.Context())
	if !who.Admin {
		if q.Tenant != "" && q.Tenant != who.Tenant {
			// Another tenant's records do not exist for this caller.
			s.Refuse(r, apitype.AuditAccessDenied, httpapi.RefusedCrossTenant, who)
			httpapi.WriteJSON(w, http.StatusOK, apitype.AuditList{Records: []apitype.AuditRecord{}})
			return
		}
		q.Tenant = who.Tenant
		if q.Tenant == "" {
			q.Tenant = "\x00" // no tenant: nothing (never everyone's)
		}
	}
	if strings.ContainsRune(q.Kind, 0) || strings.ContainsRune(q.Session, 0) {
		fail(w, fmt.Errorf("%w: NUL in a query parameter", errdefs.ErrInvalidArgument))
		return
	}
	recs, next, err := s.Audit.Query(r.Context(), q)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, apitype.AuditList{Records: recs, NextCursor: next})
}
