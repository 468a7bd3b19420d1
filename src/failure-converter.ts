/**
 * With FERRY_CODEC_KEY, failure messages and stack traces travel as an encoded payload (which the
 * codec then encrypts) instead of plain text in the failure: an error can quote a table, a
 * constraint or a value. Loaded by path (DataConverter.failureConverterPath) on the client, in the
 * worker and inside the workflow sandbox, so it may import nothing but @temporalio/common.
 *
 * The message left in the clear is not the SDK's bare "Encoded failure" but what the failure
 * already shows in the clear — its type (PostgresError.23514, a refusal's name), the activity or
 * child workflow that failed, a timeout's kind — and where the text is: the Web UI and the
 * `temporal` CLI print that message as it is stored, whatever codec endpoint they are given.
 */
import { DefaultFailureConverter, PayloadConverter, ProtoFailure, SerializationContext } from '@temporalio/common';

export const ENCRYPTED_MESSAGE_SUFFIX = 'message encrypted: read it with ferry status or ferry result and FERRY_CODEC_KEY, or in encodedAttributes through the codec endpoint';

function clearLabel(failure: ProtoFailure): string {
  if (failure.applicationFailureInfo) return failure.applicationFailureInfo.type || 'error';
  if (failure.activityFailureInfo) return `activity ${failure.activityFailureInfo.activityType?.name ?? ''} failed`.replace('  ', ' ');
  if (failure.childWorkflowExecutionFailureInfo) return `child workflow ${failure.childWorkflowExecutionFailureInfo.workflowType?.name ?? ''} failed`.replace('  ', ' ');
  if (failure.timeoutFailureInfo) return 'timed out';
  if (failure.canceledFailureInfo) return 'cancelled';
  if (failure.terminatedFailureInfo) return 'terminated';
  return 'failure';
}

class LabelledFailureConverter extends DefaultFailureConverter {
  errorToFailure(err: unknown, payloadConverter: PayloadConverter, context?: SerializationContext): ProtoFailure {
    const failure = super.errorToFailure(err, payloadConverter, context);
    if (failure.encodedAttributes) failure.message = `${clearLabel(failure)} (${ENCRYPTED_MESSAGE_SUFFIX})`;
    return failure;
  }
}

export const failureConverter = new LabelledFailureConverter({ encodeCommonAttributes: true });
