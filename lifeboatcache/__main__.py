from lifeboatcache.cli import main

main()
