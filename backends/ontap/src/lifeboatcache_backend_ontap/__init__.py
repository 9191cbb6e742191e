"""NetApp ONTAP tier for lifeboatcache: ONTAP REST checks in front of the nfs or s3 data path."""
