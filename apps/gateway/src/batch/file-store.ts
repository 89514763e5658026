/**
 * Where the Batch API's files live (docs/batch.md): input files a tenant uploads and the
 * output and error files a batch writes. Every replica reaches the same store; today it is
 * Redis (RedisFileStore, redis-file-store.ts); an S3-compatible store implements the same
 * interface. Every call is scoped to a tenant: another tenant's file is "not found".
 */
export type FilePurpose = 'batch' | 'batch_output';

/** A file's record (OpenAI's File object is rendered from it: routes/files.ts). */
export interface StoredFile {
  /** `file-<24 hex>`. */
  readonly id: string;
  readonly tenant: string;
  readonly filename: string;
  readonly purpose: FilePurpose;
  readonly bytes: number;
  /** Unix seconds. */
  readonly createdAt: number;
}

export interface NewFile {
  readonly tenant: string;
  readonly filename: string;
  readonly purpose: FilePurpose;
  readonly content: Buffer;
}

export interface FileListQuery {
  /** Only this purpose (absent: every purpose). */
  readonly purpose?: FilePurpose;
  /** Newest first (desc, the default) or oldest first. */
  readonly order?: 'asc' | 'desc';
  /** The page starts after this file id (OpenAI's cursor). */
  readonly after?: string;
  readonly limit: number;
}

export interface FilePage {
  readonly files: StoredFile[];
  readonly hasMore: boolean;
}

/** Why a put was refused (the route answers 413 / 429). */
export class FileQuotaError extends Error {
  constructor(
    readonly kind: 'file_too_large' | 'tenant_quota_exceeded',
    message: string,
  ) {
    super(message);
  }
}

export interface FileStore {
  /**
   * Stores a file; throws FileQuotaError past `maxFileBytes` or when the tenant's files
   * would hold more than `maxTenantBytes` together (checked and counted atomically).
   */
  put(file: NewFile, limits: { maxFileBytes: number; maxTenantBytes: number }): Promise<StoredFile>;
  get(tenant: string, id: string): Promise<StoredFile | undefined>;
  content(tenant: string, id: string): Promise<Buffer | undefined>;
  /** True when the file existed (and now does not); its bytes leave the tenant's total. */
  delete(tenant: string, id: string): Promise<boolean>;
  list(tenant: string, query: FileListQuery): Promise<FilePage>;
}
