"""How long each string and list an AscendInference holds may be, and why that length.

The CRD carries these as maxLength, maxItems and maxProperties, so the API server refuses an object over them
before the operator reads it; the models refuse the same for ``ascend-fleet validate`` and for objects stored
before the bounds existed.
"""

from __future__ import annotations

# A rule's raw PromQL. The operator parses it on every pass, and the parser's memory grows with the square of
# the query's length: about 180 MiB for the worst 2048-character query, 660 MiB at 4096 (docs/control-loop.md).
MAX_QUERY_LENGTH = 2048
# Linux's MAX_ARG_STRLEN (32 pages of 4 KiB): execve refuses any single argument or environment string longer.
MAX_ARG_LENGTH = 32 * 4096
MAX_ARGS = 256
MAX_ENV = 256
# Linux's PATH_MAX.
MAX_PATH_LENGTH = 4096
# A registry host, a repository of up to 255 characters, and a tag or a digest.
MAX_IMAGE_LENGTH = 512
# A qualified name: a DNS-subdomain prefix of up to 253 characters, a slash and a 63-character name.
MAX_QUALIFIED_NAME_LENGTH = 317
MAX_DNS_SUBDOMAIN_LENGTH = 253
MAX_DNS_LABEL_LENGTH = 63
MAX_LABEL_VALUE_LENGTH = 63
# The API server refuses a pod whose annotations together are over 256 KiB.
MAX_ANNOTATION_LENGTH = 256 * 1024
MAX_LABELS = 64
MAX_ANNOTATIONS = 64
MAX_NODE_SELECTOR = 64
# HCCL_SOCKET_IFNAME takes a list of interface names or prefixes (eth0,eth1 or ^=eth).
MAX_INTERFACE_LENGTH = 256
MAX_RULE_NAME_LENGTH = 128
MAX_METRIC_LENGTH = 128
MAX_RESOURCES = 16
MAX_QUANTITY_LENGTH = 64
