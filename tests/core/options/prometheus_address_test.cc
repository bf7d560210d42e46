#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/options/mount_options.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;

MountOptions Parsed(std::string_view list) {
  MountOptions options;
  options.source = "/data";
  options.mountpoint = "/mnt";
  EXPECT_TRUE(ApplyMountOptionList(options, list).ok()) << list;
  return options;
}

TEST(PrometheusAddressOptionTest, DefaultsToLoopback) {
  EXPECT_EQ(MountOptions{}.prometheus_address, "127.0.0.1");
}

TEST(PrometheusAddressOptionTest, TakesIpv4AndIpv6Addresses) {
  EXPECT_EQ(Parsed("prometheus_port=9400,prometheus_address=0.0.0.0").prometheus_address, "0.0.0.0");
  EXPECT_EQ(Parsed("prometheus_port=9400,prometheus_address=::").prometheus_address, "::");
  EXPECT_EQ(Parsed("prometheus_port=9400,prometheus_address=10.1.2.3").prometheus_address, "10.1.2.3");
}

TEST(PrometheusAddressOptionTest, AHostNameIsRefusedWithWhatToGive) {
  MountOptions options;
  Status s = ApplyMountOptionList(options, "prometheus_address=pod.local");
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("give an IPv4 or IPv6 address such as 127.0.0.1, 0.0.0.0 or ::"));
}

TEST(PrometheusAddressOptionTest, AnAddressWithoutAPortSaysToAddOne) {
  MountOptions options = Parsed("prometheus_address=0.0.0.0");
  Status s = ValidateMountOptions(options);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("add -o prometheus_port=PORT"));
}

}  // namespace
}  // namespace tensorfs
