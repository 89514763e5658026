import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { TenantConfig } from '@fairgate/config';
import { unauthorized } from '../errors.js';
import { bearerToken, type TenantDirectory } from '../tenants.js';

/** The header a batch line names its tenant in (with the replica's batch credential). */
export const BATCH_TENANT_HEADER = 'x-fairgate-batch-tenant';
/** The batch a line belongs to (read only with the credential: request/receive.ts). */
export const BATCH_ID_HEADER = 'x-fairgate-batch-id';

/**
 * How a replica's batch workers submit a line to the replica's own request pipeline on
 * behalf of the batch's tenant (line-runner.ts): the gateway stores only digests of API
 * keys, so a worker cannot present the tenant's key. It presents this credential instead,
 * a random token made at start that never leaves the process (the call goes to the
 * replica's own loopback address), with the tenant's id in BATCH_TENANT_HEADER. A request
 * with that header and any other token is refused (401), so the header opens nothing.
 */
export class BatchCredential {
  readonly #token = randomBytes(32);
  readonly authorization = `Bearer ${this.#token.toString('hex')}`;

  /** The tenant of a line's request, or 401 when the credential is not this replica's. */
  tenantOf(
    directory: TenantDirectory,
    tenantId: string,
    authorization: string | undefined,
  ): TenantConfig {
    const token = bearerToken(authorization);
    const presented = token && /^[0-9a-f]{64}$/.test(token) ? Buffer.from(token, 'hex') : null;
    if (!presented || !timingSafeEqual(presented, this.#token)) {
      throw unauthorized(`${BATCH_TENANT_HEADER} needs this replica's batch credential`);
    }
    const tenant = directory.get(tenantId);
    if (!tenant) throw unauthorized(`Unknown tenant '${tenantId}' in ${BATCH_TENANT_HEADER}`);
    return tenant;
  }
}
