import type { MiddlewareHandler } from 'hono';
import { adminUnauthorized } from '../errors.js';
import { adminTokenMatches, bearerToken } from '../tenants.js';

export interface AdminAuthOptions {
  /** The configured admin token's sha256 (read per request, so a hot reload applies). */
  tokenSha256: () => string | undefined;
}

/** Every `/admin/*` route needs `Authorization: Bearer <admin token>`; else 401. */
export function adminAuth(options: AdminAuthOptions): MiddlewareHandler {
  return async function adminAuthMiddleware(c, next) {
    const token = bearerToken(c.req.header('authorization'));
    if (!adminTokenMatches(token, options.tokenSha256())) throw adminUnauthorized();
    await next();
  };
}
