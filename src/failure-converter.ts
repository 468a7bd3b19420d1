/**
 * With FERRY_CODEC_KEY, failure messages and stack traces travel as an encoded payload (which the
 * codec then encrypts) instead of plain text in the failure: an error can quote a table, a
 * constraint or a value. Loaded by path (DataConverter.failureConverterPath) on the client, in the
 * worker and inside the workflow sandbox, so it may import nothing but @temporalio/common.
 */
import { DefaultFailureConverter } from '@temporalio/common';

export const failureConverter = new DefaultFailureConverter({ encodeCommonAttributes: true });
