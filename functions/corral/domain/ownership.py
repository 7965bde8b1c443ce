"""The tags (AWS) / labels (GCP) that mark what Corral owns.

The configured ``tag_key=tag_value`` (or ``label_key=label_value``) pair marks every instance
and spot request Corral manages; nothing without it is ever described, tagged or
terminated. Two more keys say which pool and which instance record a resource belongs to.
Lowercase with dashes: valid both as EC2 tag keys and as GCE label keys.
"""

from __future__ import annotations

POOL_TAG = "corral-pool"
RECORD_TAG = "corral-record"
